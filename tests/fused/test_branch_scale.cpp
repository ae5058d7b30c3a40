// The fused Add & Norm with branch scales (BranchScale in add_norm.hpp): LayerScale per channel and
// drop path per row, s = alpha * h + Dropout(f) * row[r] * layer[c]. Every element type, the f32
// residual stream, every SIMD target, with and without LayerScale's gradient, against a reference
// written here in double; the f64 kernel against central finite differences; scales of ones as the
// identity, bit for bit; forward and backward agreeing on each element's factor; dlayer the same
// for any thread count; the argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "addnorm/norm/add_norm.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::AddNormOptions;
using addnorm::bf16;
using addnorm::BranchScale;
using addnorm::DropoutSpec;
using addnorm::f16;
using addnorm::NormKind;
using addnorm::View2D;
using addnorm::testing::bitwise_equal;
using addnorm::testing::dtype_name;
using addnorm::testing::eps_of;
using addnorm::testing::for_each_simd_target_if_small;
using addnorm::testing::ScopedThreads;
using addnorm::testing::seeded_vector;
using addnorm::testing::throws_error;

// Drop path's row scales: every third row dropped (0), the others kept at 1.25 (1 / (1 - 0.2),
// exact in every type), and with `odd` one row at 0.7.
template <class T>
std::vector<T> row_scales(int64_t rows, bool odd) {
  std::vector<T> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) out[static_cast<size_t>(r)] = T(r % 3 == 1 ? 0.0 : (odd && r == 2 ? 0.7 : 1.25));
  return out;
}

// LayerScale: around 0.3, with one channel exactly 0 (a ReZero-like start) when d > 1.
template <class T>
std::vector<T> layer_scales(int64_t d, uint64_t seed) {
  auto out = seeded_vector<T>(static_cast<size_t>(d), seed, 0.3, 0.2);
  if (d > 1) out[1] = T(0.0);
  return out;
}

struct Case {
  NormKind kind;
  double p;
  bool layer, row, want_dl, pre;
  int64_t rows, d;
};

std::string describe(const Case& c) {
  return std::string(c.kind == NormKind::layer ? "layer" : "rms") + " p=" + std::to_string(c.p) +
         (c.layer ? " layerscale" : "") + (c.row ? " rowscale" : "") + (c.want_dl ? " dlayer" : "") +
         (c.pre ? " pre" : " post") + " rows=" + std::to_string(c.rows) + " d=" + std::to_string(c.d);
}

// |got - ref| <= k * eps(T) * max(scale, |ref|) element by element, k = 4 + log2(d): a few
// roundings, and the statistics' sums over the row's d elements.
template <class T, class G>
::testing::AssertionResult within(const char* what, const std::vector<G>& got, const std::vector<double>& ref,
                                  const std::vector<double>& scale, int64_t d) {
  const double k = (4 + std::log2(static_cast<double>(d))) * eps_of<T>();
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got[i]), err = std::abs(g - ref[i]);
    const double allowed = k * std::max(scale[i], std::abs(ref[i])) + 1e-300;
    if (!(err <= allowed))
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << g << ", reference " << ref[i] << ", error "
                                           << err << ", allowed " << allowed;
  }
  return ::testing::AssertionSuccess();
}

// The data of T with the residual stream (h, s, ds, dh) of R; the reference in double from the
// kernel's own s, mean and rstd recomputed exactly.
template <class T, class R = T>
void check_case(const Case& cs) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(describe(cs) + " " + std::string(dtype_name<T>()) + (std::is_same_v<T, R> ? "" : " f32 stream"));
  const int64_t rows = cs.rows, d = cs.d;
  const auto n = static_cast<size_t>(rows * d), dn = static_cast<size_t>(d);
  const bool ln = cs.kind == NormKind::layer;
  const auto h = seeded_vector<R>(n, 1, 0.5, 2.0), ds = seeded_vector<R>(n, 4, 0.0, 1.0);
  const auto f = seeded_vector<T>(n, 2, 0.0, 1.0), dy = seeded_vector<T>(n, 3, 0.0, 1.0);
  const auto gamma = seeded_vector<T>(dn, 5, 1.0, 0.5);
  const auto beta = ln ? seeded_vector<T>(dn, 6, 0.0, 1.0) : std::vector<T>{};
  const auto layer = cs.layer ? layer_scales<T>(d, 7) : std::vector<T>{};
  const auto row = cs.row ? row_scales<T>(rows, true) : std::vector<T>{};
  const BranchScale<T> scale{layer, row};
  AddNormOptions opt;
  opt.kind = cs.kind;
  opt.alpha = 1.5;
  opt.dropout = DropoutSpec{cs.p, 99, 1000};
  std::vector<R> s(n), dh(n);
  std::vector<T> y(n), df(n), dgamma(dn, T(0)), dbeta(ln ? dn : 0, T(0)), dlayer(cs.want_dl ? dn : 0, T(0.5));
  std::vector<S> mean(ln ? rows : 0), rstd(static_cast<size_t>(rows));
  addnorm::add_norm_forward<T, R>(View2D<R>(s.data(), rows, d), View2D<T>(y.data(), rows, d), mean, rstd,
                                  View2D<const R>(h.data(), rows, d), View2D<const T>(f.data(), rows, d), gamma, beta,
                                  opt, scale);
  addnorm::add_norm_backward<T, R>(
      View2D<R>(dh.data(), rows, d), View2D<T>(df.data(), rows, d), dgamma, dbeta, View2D<const T>(dy.data(), rows, d),
      cs.pre ? View2D<const R>(ds.data(), rows, d) : View2D<const R>{}, View2D<const R>(s.data(), rows, d), mean, rstd,
      gamma, opt, scale, dlayer, cs.want_dl ? View2D<const T>(f.data(), rows, d) : View2D<const T>{});

  // Each element's factor on f, and s.
  std::vector<double> fac(n), s_ref(n), s_scale(n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const auto i = static_cast<size_t>(r * d + c);
      fac[i] = (opt.dropout.keep(i) ? opt.dropout.scale() : 0.0) * (cs.row ? static_cast<double>(row[r]) : 1.0) *
               (cs.layer ? static_cast<double>(layer[c]) : 1.0);
      const double a = opt.alpha * static_cast<double>(h[i]), b = fac[i] * static_cast<double>(f[i]);
      s_ref[i] = a + b;
      s_scale[i] = std::abs(a) + std::abs(b);
    }
  // s is rounded to R (the f32 stream: f32's roundings).
  EXPECT_TRUE(within<R>("s", s, s_ref, s_scale, d));

  // The norm of the kernel's s, its backward and the rest, in double.
  std::vector<double> y_ref(n), y_scale(n), dh_ref(n), dh_scale(n), df_ref(n), df_scale(n), dl_ref(dn, 0.5),
      dl_scale(dn, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const auto row_at = [&](const auto& v, int64_t c) {
      return static_cast<double>(v[static_cast<size_t>(r * d + c)]);
    };
    double m = 0, q = 0;
    for (int64_t c = 0; c < d; ++c) m += ln ? row_at(s, c) : 0.0;
    m /= static_cast<double>(d);
    for (int64_t c = 0; c < d; ++c) q += (row_at(s, c) - m) * (row_at(s, c) - m);
    const double rs = 1.0 / std::sqrt(q / static_cast<double>(d) + opt.eps);
    double mg = 0, mgx = 0, gmax = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double g = row_at(dy, c) * static_cast<double>(gamma[c]), xh = (row_at(s, c) - m) * rs;
      mg += g;
      mgx += g * xh;
      gmax = std::max(gmax, std::abs(g));
    }
    mg /= static_cast<double>(d);
    mgx /= static_cast<double>(d);
    // the terms of dx: rstd * (|g| + |mean g| + |x_hat| * |mean g x_hat|), |x_hat| <= sqrt(d)
    const double dx_bound = rs * (gmax + std::abs(mg) + std::sqrt(static_cast<double>(d)) * std::abs(mgx)) * 2;
    for (int64_t c = 0; c < d; ++c) {
      const auto i = static_cast<size_t>(r * d + c);
      const double xh = (row_at(s, c) - m) * rs, g = row_at(dy, c) * static_cast<double>(gamma[c]);
      y_ref[i] = xh * static_cast<double>(gamma[c]) + (ln ? static_cast<double>(beta[c]) : 0.0);
      y_scale[i] = (1 + std::abs(xh)) * (std::abs(static_cast<double>(gamma[c])) + 1);
      const double dsv = cs.pre ? row_at(ds, c) : 0.0;
      const double t = rs * (g - (ln ? mg : 0.0) - xh * mgx) + dsv;
      const double t_scale = dx_bound + std::abs(dsv);
      dh_ref[i] = opt.alpha * t;
      dh_scale[i] = opt.alpha * t_scale;
      df_ref[i] = t * fac[i];
      df_scale[i] = t_scale * std::abs(fac[i]);
      if (cs.want_dl) {
        const double pre_layer = (opt.dropout.keep(i) ? opt.dropout.scale() : 0.0) *
                                 (cs.row ? static_cast<double>(row[r]) : 1.0) * static_cast<double>(f[i]);
        dl_ref[c] += t * pre_layer;
        dl_scale[c] += t_scale * std::abs(pre_layer);
      }
    }
  }
  EXPECT_TRUE(within<T>("y", y, y_ref, y_scale, d));
  EXPECT_TRUE(within<R>("dh", dh, dh_ref, dh_scale, d));
  EXPECT_TRUE(within<T>("df", df, df_ref, df_scale, d));
  if (cs.want_dl) {
    EXPECT_TRUE(within<T>("dlayer", dlayer, dl_ref, dl_scale, d));
  }
}

template <class T, class R = T>
void sweep(bool f32_stream_only_layer) {
  for (auto [rows, d] : {std::pair<int64_t, int64_t>{1, 1}, {5, 3}, {19, 64}, {6, 100}, {4, 768}, {3, 4099}})
    for_each_simd_target_if_small(rows * d, [&, rows = rows, d = d] {
      for (NormKind kind : {NormKind::layer, NormKind::rms}) {
        if (f32_stream_only_layer && kind == NormKind::rms && d != 768) continue;
        for (double p : {0.0, 0.2})
          for (int scales = 1; scales < 4; ++scales)
            for (bool want_dl : {false, true}) {
              const bool layer = (scales & 1) != 0, row = (scales & 2) != 0;
              if (want_dl && !layer) continue;
              check_case<T, R>(Case{kind, p, layer, row, want_dl, (rows + scales) % 2 == 0, rows, d});
            }
      }
    });
}

TEST(BranchScale, F32MatchesReference) { sweep<float>(false); }
TEST(BranchScale, F64MatchesReference) { sweep<double>(false); }
TEST(BranchScale, BF16MatchesReference) { sweep<bf16>(false); }
TEST(BranchScale, F16MatchesReference) { sweep<f16>(false); }
TEST(BranchScale, F32StreamMatchesReference) {
  sweep<bf16, float>(true);
  sweep<f16, float>(true);
}

// L = sum(wy * y) + sum(ws * s); the f64 kernel's dh, df and dlayer against central differences,
// LayerNorm and RMSNorm, with dropout, a drop-path row and a LayerScale channel at 0.
TEST(BranchScale, FiniteDifferencesF64) {
  for (NormKind kind : {NormKind::layer, NormKind::rms}) {
    SCOPED_TRACE(kind == NormKind::layer ? "layer" : "rms");
    const int64_t rows = 4, d = 6;
    const auto n = static_cast<size_t>(rows * d);
    const bool ln = kind == NormKind::layer;
    auto h = seeded_vector<double>(n, 11, 0.3, 1.0), f = seeded_vector<double>(n, 12, 0.0, 1.0);
    auto layer = layer_scales<double>(d, 13);
    const auto wy = seeded_vector<double>(n, 14, 0.0, 1.0), ws = seeded_vector<double>(n, 15, 0.0, 1.0);
    const auto gamma = seeded_vector<double>(static_cast<size_t>(d), 16, 1.0, 0.3);
    const auto beta = ln ? seeded_vector<double>(static_cast<size_t>(d), 17, 0.0, 1.0) : std::vector<double>{};
    const auto row = row_scales<double>(rows, true);
    AddNormOptions opt;
    opt.kind = kind;
    opt.alpha = 1.7;
    opt.dropout = DropoutSpec{0.25, 3, 0};
    std::vector<double> s(n), y(n), mean(ln ? rows : 0), rstd(static_cast<size_t>(rows));
    const auto forward = [&] {
      addnorm::add_norm_forward<double>(View2D<double>(s.data(), rows, d), View2D<double>(y.data(), rows, d), mean,
                                        rstd, View2D<const double>(h.data(), rows, d),
                                        View2D<const double>(f.data(), rows, d), gamma, beta, opt,
                                        BranchScale<double>{layer, row});
    };
    const auto loss = [&] {
      forward();
      return addnorm::testing::dot(y, wy) + addnorm::testing::dot(s, ws);
    };
    forward();
    std::vector<double> dh(n), df(n), dlayer(static_cast<size_t>(d), 0.0);
    addnorm::add_norm_backward<double>(
        View2D<double>(dh.data(), rows, d), View2D<double>(df.data(), rows, d), {}, {},
        View2D<const double>(wy.data(), rows, d), View2D<const double>(ws.data(), rows, d),
        View2D<const double>(s.data(), rows, d), mean, rstd, gamma, opt, BranchScale<double>{layer, row}, dlayer,
        View2D<const double>(f.data(), rows, d));
    const auto fd_h = addnorm::testing::central_differences(h, loss);
    const auto fd_f = addnorm::testing::central_differences(f, loss);
    const auto fd_layer = addnorm::testing::central_differences(layer, loss);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(dh[i], fd_h[i], 1e-7 * (1 + std::abs(dh[i]))) << "dh " << i;
      EXPECT_NEAR(df[i], fd_f[i], 1e-7 * (1 + std::abs(df[i]))) << "df " << i;
    }
    for (size_t c = 0; c < static_cast<size_t>(d); ++c)
      EXPECT_NEAR(dlayer[c], fd_layer[c], 1e-7 * (1 + std::abs(dlayer[c]))) << "dlayer " << c;
    EXPECT_NE(dlayer[1], 0.0);  // the channel whose scale is 0 still learns
  }
}

// Scales of ones change no bit: s and y of the forward, dh, df, dgamma and dbeta of the backward
// (with LayerScale's gradient asked for or not), against the call without scales; on every target,
// on batched (64-wide) and single rows.
TEST(BranchScale, OnesAreTheIdentityBitForBit) {
  const auto run = [](int64_t rows, int64_t d, bool with_scales, bool want_dl, double p) {
    const auto n = static_cast<size_t>(rows * d), dn = static_cast<size_t>(d);
    const auto h = seeded_vector<float>(n, 1, 0.5, 2.0), f = seeded_vector<float>(n, 2, 0.0, 1.0);
    const auto dy = seeded_vector<float>(n, 3, 0.0, 1.0), ds = seeded_vector<float>(n, 4, 0.0, 1.0);
    const auto gamma = seeded_vector<float>(dn, 5, 1.0, 0.5), beta = seeded_vector<float>(dn, 6, 0.0, 1.0);
    const std::vector<float> layer(dn, 1.0f), row(static_cast<size_t>(rows), 1.0f);
    const BranchScale<float> scale = with_scales ? BranchScale<float>{layer, row} : BranchScale<float>{};
    AddNormOptions opt;
    opt.dropout = DropoutSpec{p, 5, 0};
    std::vector<float> s(n), y(n), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows)), dh(n), df(n),
        dg(dn, 0.0f), db(dn, 0.0f), dl(want_dl ? dn : 0, 0.0f);
    addnorm::add_norm_forward<float>(View2D<float>(s.data(), rows, d), View2D<float>(y.data(), rows, d), mean, rstd,
                                     View2D<const float>(h.data(), rows, d), View2D<const float>(f.data(), rows, d),
                                     gamma, beta, opt, scale);
    addnorm::add_norm_backward<float>(View2D<float>(dh.data(), rows, d), View2D<float>(df.data(), rows, d), dg, db,
                                      View2D<const float>(dy.data(), rows, d), View2D<const float>(ds.data(), rows, d),
                                      View2D<const float>(s.data(), rows, d), mean, rstd, gamma, opt, scale, dl,
                                      want_dl ? View2D<const float>(f.data(), rows, d) : View2D<const float>{});
    std::vector<float> out = s;
    for (const auto* v : {&y, &dh, &df, &dg, &db}) out.insert(out.end(), v->begin(), v->end());
    return out;
  };
  addnorm::testing::for_each_simd_target([&] {
    for (auto [rows, d] : {std::pair<int64_t, int64_t>{40, 64}, {5, 777}, {3, 4096}})
      for (double p : {0.0, 0.3})
        for (bool want_dl : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "rows " << rows << " d " << d << " p " << p << " dlayer " << want_dl);
          EXPECT_TRUE(bitwise_equal<float>("s, y, dh, df, dgamma, dbeta", run(rows, d, true, want_dl, p),
                                           run(rows, d, false, false, p)));
        }
  });
}

// Forward with h = 0, f = 1 writes s = each element's factor; backward with dy = 0, ds = 1 writes
// df = the same factor, the same value, with LayerScale's gradient asked for or not (f32: the backward
// rounds keep * row to f32 before the layer scale, as the forward's factor does).
TEST(BranchScale, ForwardAndBackwardAgreeOnTheFactor) {
  const int64_t rows = 13, d = 101;
  const auto n = static_cast<size_t>(rows * d);
  const std::vector<float> h(n, 0.0f), f(n, 1.0f), dy(n, 0.0f), ds(n, 1.0f);
  const auto layer = layer_scales<float>(d, 8);
  const auto row = row_scales<float>(rows, true);
  AddNormOptions opt;
  opt.dropout = DropoutSpec{0.3, 2024, 17};
  std::vector<float> s(n), y(n), mean(rows), rstd(rows);
  addnorm::add_norm_forward<float>(View2D<float>(s.data(), rows, d), View2D<float>(y.data(), rows, d), mean, rstd,
                                   View2D<const float>(h.data(), rows, d), View2D<const float>(f.data(), rows, d), {},
                                   {}, opt, {layer, row});
  for (bool want_dl : {false, true}) {
    std::vector<float> dh(n), df(n), dl(want_dl ? d : 0, 0.0f);
    addnorm::add_norm_backward<float>(View2D<float>(dh.data(), rows, d), View2D<float>(df.data(), rows, d), {}, {},
                                      View2D<const float>(dy.data(), rows, d), View2D<const float>(ds.data(), rows, d),
                                      View2D<const float>(s.data(), rows, d), mean, rstd, {}, opt, {layer, row}, dl,
                                      want_dl ? View2D<const float>(f.data(), rows, d) : View2D<const float>{});
    // equal values (a dropped element of a negative layer scale is -0 in df, +0 in s: 0 * -l + 0)
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += df[i] == s[i] ? 0 : 1;
    EXPECT_EQ(differ, 0u) << (want_dl ? "df (dlayer)" : "df");
  }
  int64_t zero_rows = 0;
  for (int64_t r = 0; r < rows; ++r)
    zero_rows += std::all_of(s.begin() + r * d, s.begin() + (r + 1) * d, [](float v) { return v == 0.0f; }) ? 1 : 0;
  EXPECT_EQ(zero_rows, 4);  // rows 1, 4, 7, 10: dropped by the drop path
}

void check_threads(int64_t rows, int64_t d) {
  SCOPED_TRACE("d " + std::to_string(d));
  const auto n = static_cast<size_t>(rows * d);
  const auto s = seeded_vector<float>(n, 1, 1.0, 3.0), dy = seeded_vector<float>(n, 2, 0.0, 1.0);
  const auto f = seeded_vector<float>(n, 3, 0.0, 1.0), gamma = seeded_vector<float>(d, 4, 1.0, 0.5);
  const auto layer = layer_scales<float>(d, 5);
  const auto row = row_scales<float>(rows, false);
  std::vector<float> mean(rows), rstd(rows);
  for (int64_t r = 0; r < rows; ++r) rstd[static_cast<size_t>(r)] = 1.0f / (1.0f + static_cast<float>(r % 7));
  AddNormOptions opt;
  opt.dropout = DropoutSpec{0.1, 8, 0};
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    ScopedThreads scoped(threads);
    std::vector<float> dh(n), df(n), dg(d, 0.0f), dl(d, 0.0f);
    addnorm::add_norm_backward<float>(View2D<float>(dh.data(), rows, d), View2D<float>(df.data(), rows, d), dg, {},
                                      View2D<const float>(dy.data(), rows, d), {},
                                      View2D<const float>(s.data(), rows, d), mean, rstd, gamma, opt, {layer, row}, dl,
                                      View2D<const float>(f.data(), rows, d));
    dl.insert(dl.end(), dg.begin(), dg.end());
    dl.insert(dl.end(), df.begin(), df.end());
    results.push_back(dl);
  }
  EXPECT_TRUE(bitwise_equal<float>("dlayer, dgamma, df (1 and 2 threads)", results[0], results[1]));
  EXPECT_TRUE(bitwise_equal<float>("dlayer, dgamma, df (1 and 3 threads)", results[0], results[2]));
}

// Rows of 515 (one at a time) and of 64 (in batches).
TEST(BranchScale, LayerGradientIndependentOfThreadCount) {
  for (const int64_t d : {515, 64}) check_threads(300, d);
}

TEST(BranchScale, ErrorsNameTheFunctionAndTheArgument) {
  const int64_t rows = 2, d = 4;
  std::vector<float> a(8, 1.0f), out(8), y(8), dh(8), df(8), mean(2), rstd(2, 1.0f), l4(4, 1.0f), l3(3), r2(2, 1.0f),
      r3(3), dl4(4), dl3(3);
  const View2D<const float> in(a.data(), rows, d);
  const AddNormOptions opt;
  const auto fwd = [&](BranchScale<float> sc) {
    addnorm::add_norm_forward<float>(View2D<float>(out.data(), rows, d), View2D<float>(y.data(), rows, d), mean, rstd,
                                     in, in, {}, {}, opt, sc);
  };
  const auto bwd = [&](BranchScale<float> sc, std::span<float> dl, View2D<const float> f) {
    addnorm::add_norm_backward<float>(View2D<float>(dh.data(), rows, d), View2D<float>(df.data(), rows, d), {}, {}, in,
                                      {}, in, mean, rstd, {}, opt, sc, dl, f);
  };
  EXPECT_TRUE(throws_error([&] { fwd({l3, {}}); }, {"[add_norm_forward]", "layer scale has 3 elements, expected 4"}));
  EXPECT_TRUE(throws_error([&] { fwd({{}, r3}); }, {"[add_norm_forward]", "row scale has 3 elements, expected 2"}));
  EXPECT_TRUE(throws_error([&] { bwd({l3, r2}, {}, {}); }, {"[add_norm_backward]", "layer scale has 3 elements"}));
  EXPECT_TRUE(throws_error([&] { bwd({l4, r3}, {}, {}); }, {"[add_norm_backward]", "row scale has 3 elements"}));
  EXPECT_TRUE(throws_error([&] { bwd({l4, r2}, dl3, in); }, {"[add_norm_backward]", "dlayer has 3 elements"}));
  EXPECT_TRUE(throws_error(
      [&] {
        bwd({{}, r2}, dl4, in);
      },
      {"[add_norm_backward]", "dlayer requested but the layer scale is absent"}));
  EXPECT_TRUE(throws_error(
      [&] {
        bwd({l4, r2}, dl4, {});
      },
      {"[add_norm_backward]", "dlayer requested but f is absent"}));
  EXPECT_TRUE(throws_error(
      [&] {
        bwd({l4, r2}, dl4, View2D<const float>(a.data(), 1, d));
      },
      {"[add_norm_backward]", "f"}));
  // Scales without dlayer need no f; an empty call is a no-op.
  bwd({l4, r2}, {}, {});
  addnorm::add_norm_backward<float>(View2D<float>(dh.data(), 0, d), View2D<float>(df.data(), 0, d), {}, {},
                                    View2D<const float>(a.data(), 0, d), {}, View2D<const float>(a.data(), 0, d), {},
                                    {}, {}, opt, {l4, {}}, {}, {});
}

}  // namespace
