// Fused residual add + dropout + norm, and ReZero: against a composition of the f64 reference
// kernels, against central finite differences (f64), mask agreement between forward and backward,
// p = 0 exactness, thread-count determinism and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "addnorm/core/parallel.hpp"
#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::AddNormOptions;
using addnorm::DropoutSpec;
using addnorm::NormKind;
using addnorm::View2D;
using addnorm::testing::bitwise_equal;
using addnorm::testing::seeded_vector;

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

// max |a - b| / max(1, max |b|, terms): terms bounds the size of the terms that b was summed from,
// where they can be far larger than b (the backward of a one-element LayerNorm row is 0, from terms
// of size rstd * |gamma * dy|, 316 with eps 1e-5).
template <class A>
double rel_err(const std::vector<A>& a, const std::vector<double>& b, double terms = 0) {
  double worst = 0, scale = std::max(1.0, terms);
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst / scale;
}

struct Case {
  NormKind kind;
  double p;
  double alpha;
  bool residual_grad;  // pre-norm (ds given) or post-norm
  int64_t rows, d;
};

std::string describe(const Case& c) {
  return std::string(c.kind == NormKind::layer ? "layer" : "rms") + " p=" + std::to_string(c.p) +
         " alpha=" + std::to_string(c.alpha) + (c.residual_grad ? " pre" : " post") +
         " rows=" + std::to_string(c.rows) + " d=" + std::to_string(c.d);
}

template <class T>
void check_against_reference(const Case& cs) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(describe(cs));
  const int64_t rows = cs.rows, d = cs.d;
  const size_t n = static_cast<size_t>(rows * d);
  const bool layer = cs.kind == NormKind::layer;
  auto h = seeded_vector<T>(n, 1, 0.5, 2.0), f = seeded_vector<T>(n, 2), dy = seeded_vector<T>(n, 3),
       ds = seeded_vector<T>(n, 4);
  auto gamma = seeded_vector<T>(static_cast<size_t>(d), 5, 1.0, 0.5),
       beta = seeded_vector<T>(static_cast<size_t>(d), 6);
  if (!layer) beta.clear();
  AddNormOptions opt;
  opt.kind = cs.kind;
  opt.alpha = cs.alpha;
  opt.dropout = DropoutSpec{cs.p, 99, 1000};
  std::vector<T> s(n), y(n), dgamma(static_cast<size_t>(d), T{0}), dbeta(layer ? d : 0, T{0});
  std::vector<S> mean(layer ? rows : 0), rstd(static_cast<size_t>(rows));
  addnorm::add_norm_forward<T>(View2D<T>(s.data(), rows, d), View2D<T>(y.data(), rows, d), mean, rstd,
                               View2D<const T>(h.data(), rows, d), View2D<const T>(f.data(), rows, d), gamma, beta,
                               opt);
  // s against alpha * h + keep * f / (1 - p) in double
  std::vector<double> s_ref(n);
  for (size_t i = 0; i < n; ++i)
    s_ref[i] = cs.alpha * static_cast<double>(h[i]) +
               (opt.dropout.keep(i) ? opt.dropout.scale() * static_cast<double>(f[i]) : 0.0);
  EXPECT_LE(rel_err(s, s_ref), tolerance<T>()) << "s";
  // y against the reference norm of the kernel's own s
  const View2D<const T> sv(s.data(), rows, d);
  const auto fwd = layer ? addnorm::ref::layer_norm_forward<T>(sv, gamma, beta, opt.eps)
                         : addnorm::ref::rms_norm_forward<T>(sv, gamma, opt.eps);
  EXPECT_LE(rel_err(y, fwd.y), tolerance<T>()) << "y";
  EXPECT_LE(rel_err(rstd, fwd.rstd), tolerance<T>()) << "rstd";

  // dh and df on cache lines: large inputs of rows of 4096 or more then go four rows at a time.
  addnorm::testing::Placed<T> dh_at(static_cast<int64_t>(n), 0), df_at(static_cast<int64_t>(n), 0);
  addnorm::add_norm_backward<T>(View2D<T>(dh_at.data(), rows, d), View2D<T>(df_at.data(), rows, d), dgamma, dbeta,
                                View2D<const T>(dy.data(), rows, d),
                                cs.residual_grad ? View2D<const T>(ds.data(), rows, d) : View2D<const T>(), sv, mean,
                                rstd, gamma, opt);
  const std::vector<T> dh = dh_at.values(), df = df_at.values();
  const View2D<const T> dyv(dy.data(), rows, d);
  const auto bwd = layer ? addnorm::ref::layer_norm_backward<T>(dyv, sv, gamma, opt.eps)
                         : addnorm::ref::rms_norm_backward<T>(dyv, sv, gamma, opt.eps);
  std::vector<double> dh_ref(n), df_ref(n);
  double terms = 0;  // the largest rstd * |gamma * dy|, the size of the norm's dx terms
  for (size_t i = 0; i < n; ++i) {
    const double t = bwd.dx[i] + (cs.residual_grad ? static_cast<double>(ds[i]) : 0.0);
    dh_ref[i] = cs.alpha * t;
    df_ref[i] = opt.dropout.keep(i) ? t * opt.dropout.scale() : 0.0;
    const size_t r = i / static_cast<size_t>(d), c = i % static_cast<size_t>(d);
    terms = std::max(terms, fwd.rstd[r] * std::abs(static_cast<double>(gamma[c]) * static_cast<double>(dy[i])));
  }
  EXPECT_LE(rel_err(dh, dh_ref, std::abs(cs.alpha) * terms), tolerance<T>()) << "dh";
  EXPECT_LE(rel_err(df, df_ref, opt.dropout.scale() * terms), tolerance<T>()) << "df";
  EXPECT_LE(rel_err(dgamma, bwd.dgamma), tolerance<T>() * std::sqrt(static_cast<double>(rows))) << "dgamma";
  if (layer) {
    EXPECT_LE(rel_err(dbeta, bwd.dbeta), tolerance<T>() * std::sqrt(static_cast<double>(rows))) << "dbeta";
  }
}

TEST(AddNorm, MatchesReferenceComposition) {
  for (NormKind kind : {NormKind::layer, NormKind::rms})
    for (double p : {0.0, 0.1, 0.5, 1.0})
      for (double alpha : {1.0, 2.5})
        for (bool pre : {true, false})
          for (auto [rows, d] : {std::pair<int64_t, int64_t>{1, 1}, {5, 3}, {7, 17}, {33, 64}, {9, 4099}}) {
            const Case c{kind, p, alpha, pre, rows, d};
            check_against_reference<float>(c);
            check_against_reference<double>(c);
          }
}

// Large inputs of f32 rows of 4096 or more whose dh and df start on cache lines go four rows at a
// time (add_norm_backward_quad), then a pair and an odd row one at a time as left in each chunk of
// rows: 603 rows against the reference, for both norms, with dropout and with DeepNorm's alpha,
// pre- and post-norm.
TEST(AddNorm, StreamedWideRowQuads) {
  addnorm::testing::with_wide_l1_on_and_off([] {
    for (NormKind kind : {NormKind::layer, NormKind::rms})
      for (auto [p, alpha] : {std::pair<double, double>{0.0, 2.5}, {0.1, 1.0}})
        for (bool pre : {true, false}) check_against_reference<float>(Case{kind, p, alpha, pre, 603, 4096});
  });
}

// The fours' parameter gradients, dh and df are the same bits on any number of threads: rows are
// grouped in fours by their place in a chunk of rows, never by thread.
TEST(AddNorm, StreamedWideRowQuadsIndependentOfThreadCount) {
  addnorm::testing::with_wide_l1_on_and_off([] {
    const int64_t rows = 603, d = 4096;
    const size_t n = rows * d;
    auto s = seeded_vector<float>(n, 1, 1.0, 3.0), dy = seeded_vector<float>(n, 2), ds = seeded_vector<float>(n, 3),
         gamma = seeded_vector<float>(d, 4), beta = seeded_vector<float>(d, 7);
    std::vector<float> mean(rows), rstd(rows), y(n), h = seeded_vector<float>(n, 5), f = seeded_vector<float>(n, 6);
    AddNormOptions opt;
    opt.dropout = DropoutSpec{0.1, 8, 0};
    addnorm::add_norm_forward<float>(View2D<float>(s.data(), rows, d), View2D<float>(y.data(), rows, d), mean, rstd,
                                     View2D<const float>(h.data(), rows, d), View2D<const float>(f.data(), rows, d),
                                     gamma, beta, opt);
    const int before = addnorm::num_threads();
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      addnorm::set_num_threads(threads);
      addnorm::testing::Placed<float> dh(static_cast<int64_t>(n), 0), df(static_cast<int64_t>(n), 0);
      std::vector<float> dgamma(d, 0.0f), dbeta(d, 0.0f);
      addnorm::add_norm_backward<float>(View2D<float>(dh.data(), rows, d), View2D<float>(df.data(), rows, d), dgamma,
                                        dbeta, View2D<const float>(dy.data(), rows, d),
                                        View2D<const float>(ds.data(), rows, d), View2D<const float>(s.data(), rows, d),
                                        mean, rstd, gamma, opt);
      std::vector<float> all = dh.values();
      std::vector<float> dfv = df.values();
      for (const auto* v : {&dfv, &dgamma, &dbeta}) all.insert(all.end(), v->begin(), v->end());
      results.push_back(std::move(all));
    }
    addnorm::set_num_threads(before);
    EXPECT_TRUE(results[0] == results[1]);
    EXPECT_TRUE(results[0] == results[2]);
  });
}

// f32 LayerNorm rows of kFusedRebuildCols (src/simd/row_ops.hpp) or more without dropout build the
// residual row again in the output pass instead of reading a scratch copy, unless s aliases h. The
// two paths must give the same bits (s, y, mean, rstd), on every SIMD target, with DeepNorm's alpha,
// each combination of gamma and beta, rows on a line and off it (a scalar head and tail), and
// streamed rows (the last shape).
TEST(AddNorm, WideRowsBuiltAgainGiveTheSameBits) {
  struct Shape {
    int64_t rows, d, stride, offset;
  };
  const auto run = [](const Shape& sh, double alpha, bool g, bool b, bool in_place) {
    const int64_t n = sh.offset + sh.rows * sh.stride;
    auto h = seeded_vector<float>(static_cast<size_t>(n), 21, 0.5, 2.0),
         f = seeded_vector<float>(static_cast<size_t>(n), 22);
    const auto gamma = seeded_vector<float>(static_cast<size_t>(sh.d), 23, 1.0, 0.3);
    const auto beta = seeded_vector<float>(static_cast<size_t>(sh.d), 24);
    std::vector<float> s_sep(static_cast<size_t>(n)), y(static_cast<size_t>(n)), mean(sh.rows), rstd(sh.rows);
    AddNormOptions opt;
    opt.alpha = alpha;
    float* s = in_place ? h.data() : s_sep.data();
    addnorm::add_norm_forward<float>(View2D<float>(s + sh.offset, sh.rows, sh.d, sh.stride),
                                     View2D<float>(y.data() + sh.offset, sh.rows, sh.d, sh.stride), mean, rstd,
                                     View2D<const float>(h.data() + sh.offset, sh.rows, sh.d, sh.stride),
                                     View2D<const float>(f.data() + sh.offset, sh.rows, sh.d, sh.stride),
                                     g ? std::span<const float>(gamma) : std::span<const float>{},
                                     b ? std::span<const float>(beta) : std::span<const float>{}, opt);
    std::vector<float> out;
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t c = 0; c < sh.d; ++c) {
        const auto i = static_cast<size_t>(sh.offset + r * sh.stride + c);
        out.push_back(s[i]);
        out.push_back(y[i]);
      }
    out.insert(out.end(), mean.begin(), mean.end());
    out.insert(out.end(), rstd.begin(), rstd.end());
    return out;
  };
  addnorm::testing::for_each_simd_target([&] {
    for (const Shape& sh : {Shape{3, 2048, 2048, 0}, Shape{5, 4096, 4096, 16}, Shape{4, 4117, 4128, 3}})
      for (double alpha : {1.0, 2.5})
        for (int gb = 0; gb < 4; ++gb) {
          SCOPED_TRACE(::testing::Message() << "d " << sh.d << " offset " << sh.offset << " alpha " << alpha
                                            << " gamma " << (gb & 1) << " beta " << (gb >> 1));
          EXPECT_TRUE(bitwise_equal<float>("s, y, mean, rstd", run(sh, alpha, gb & 1, gb >> 1, false),
                                           run(sh, alpha, gb & 1, gb >> 1, true)));
        }
  });
  const Shape streamed{700, 4096, 4096, 0};  // 11 MiB per array: streamed
  EXPECT_TRUE(bitwise_equal<float>("s, y, mean, rstd (streamed)", run(streamed, 2.5, true, true, false),
                                   run(streamed, 2.5, true, true, true)));
}

TEST(AddNorm, ZeroDropoutIsExactAdd) {
  const int64_t rows = 4, d = 37;
  const size_t n = rows * d;
  auto h = seeded_vector<float>(n, 1), f = seeded_vector<float>(n, 2);
  std::vector<float> s(n), y(n), rstd(rows), mean(rows);
  AddNormOptions opt;
  opt.dropout = DropoutSpec{0.0, 5, 0};
  addnorm::add_norm_forward<float>(View2D<float>(s.data(), rows, d), View2D<float>(y.data(), rows, d), mean, rstd,
                                   View2D<const float>(h.data(), rows, d), View2D<const float>(f.data(), rows, d), {},
                                   {}, opt);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(s[i], h[i] + f[i]) << i;
}

// Forward with h = 0, f = 1 writes s = keep / (1 - p); backward with dy = 0, ds = 1 writes
// df = keep / (1 - p): the two must agree element for element.
TEST(AddNorm, ForwardAndBackwardAgreeOnTheMask) {
  const int64_t rows = 13, d = 101;
  const size_t n = rows * d;
  std::vector<float> h(n, 0.0f), f(n, 1.0f), s(n), y(n), rstd(rows), mean(rows), dy(n, 0.0f), ds(n, 1.0f), dh(n), df(n);
  AddNormOptions opt;
  opt.dropout = DropoutSpec{0.3, 2024, 17};
  addnorm::add_norm_forward<float>(View2D<float>(s.data(), rows, d), View2D<float>(y.data(), rows, d), mean, rstd,
                                   View2D<const float>(h.data(), rows, d), View2D<const float>(f.data(), rows, d), {},
                                   {}, opt);
  addnorm::add_norm_backward<float>(View2D<float>(dh.data(), rows, d), View2D<float>(df.data(), rows, d), {}, {},
                                    View2D<const float>(dy.data(), rows, d), View2D<const float>(ds.data(), rows, d),
                                    View2D<const float>(s.data(), rows, d), mean, rstd, {}, opt);
  int64_t dropped = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(s[i], df[i]) << i;
    dropped += s[i] == 0.0f ? 1 : 0;
  }
  EXPECT_GT(dropped, static_cast<int64_t>(n) / 5);
  EXPECT_LT(dropped, static_cast<int64_t>(n) * 2 / 5);
}

// L = sum(wy * y) + sum(ws * s); the f64 kernel's gradients against central differences.
TEST(AddNorm, FiniteDifferencesF64) {
  for (NormKind kind : {NormKind::layer, NormKind::rms}) {
    const int64_t rows = 3, d = 6;
    const size_t n = rows * d;
    const bool layer = kind == NormKind::layer;
    auto h = seeded_vector<double>(n, 11, 0.3, 1.0), f = seeded_vector<double>(n, 12),
         wy = seeded_vector<double>(n, 13), ws = seeded_vector<double>(n, 14),
         gamma = seeded_vector<double>(d, 15, 1.0, 0.3), beta = seeded_vector<double>(d, 16);
    if (!layer) beta.clear();
    AddNormOptions opt;
    opt.kind = kind;
    opt.alpha = 1.7;
    opt.dropout = DropoutSpec{0.25, 3, 0};
    auto loss = [&](const std::vector<double>& hh, const std::vector<double>& ff, const std::vector<double>& gg,
                    const std::vector<double>& bb) {
      std::vector<double> s(n), y(n), mean(layer ? rows : 0), rstd(rows);
      addnorm::add_norm_forward<double>(View2D<double>(s.data(), rows, d), View2D<double>(y.data(), rows, d), mean,
                                        rstd, View2D<const double>(hh.data(), rows, d),
                                        View2D<const double>(ff.data(), rows, d), gg, bb, opt);
      double l = 0;
      for (size_t i = 0; i < n; ++i) l += wy[i] * y[i] + ws[i] * s[i];
      return l;
    };
    std::vector<double> s(n), y(n), mean(layer ? rows : 0), rstd(rows), dh(n), df(n), dgamma(d, 0.0),
        dbeta(layer ? d : 0, 0.0);
    addnorm::add_norm_forward<double>(View2D<double>(s.data(), rows, d), View2D<double>(y.data(), rows, d), mean, rstd,
                                      View2D<const double>(h.data(), rows, d), View2D<const double>(f.data(), rows, d),
                                      gamma, beta, opt);
    addnorm::add_norm_backward<double>(View2D<double>(dh.data(), rows, d), View2D<double>(df.data(), rows, d), dgamma,
                                       dbeta, View2D<const double>(wy.data(), rows, d),
                                       View2D<const double>(ws.data(), rows, d),
                                       View2D<const double>(s.data(), rows, d), mean, rstd, gamma, opt);
    const double step = 1e-6;
    auto fd = [&](std::vector<double>& v, size_t i) {
      const double keep = v[i];
      v[i] = keep + step;
      const double up = loss(h, f, gamma, beta);
      v[i] = keep - step;
      const double down = loss(h, f, gamma, beta);
      v[i] = keep;
      return (up - down) / (2 * step);
    };
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(dh[i], fd(h, i), 1e-7 * (1 + std::abs(dh[i]))) << "dh " << i;
      EXPECT_NEAR(df[i], fd(f, i), 1e-7 * (1 + std::abs(df[i]))) << "df " << i;
    }
    for (size_t c = 0; c < static_cast<size_t>(d); ++c) {
      EXPECT_NEAR(dgamma[c], fd(gamma, c), 1e-7 * (1 + std::abs(dgamma[c]))) << "dgamma " << c;
      if (layer) {
        EXPECT_NEAR(dbeta[c], fd(beta, c), 1e-7 * (1 + std::abs(dbeta[c]))) << "dbeta " << c;
      }
    }
  }
}

TEST(AddNorm, ParameterGradientsIndependentOfThreadCount) {
  const int64_t rows = 300, d = 515;
  const size_t n = rows * d;
  auto s = seeded_vector<float>(n, 1, 1.0, 3.0), dy = seeded_vector<float>(n, 2), ds = seeded_vector<float>(n, 3),
       gamma = seeded_vector<float>(d, 4);
  std::vector<float> mean(rows), rstd(rows), y(n), h = seeded_vector<float>(n, 5), f = seeded_vector<float>(n, 6);
  AddNormOptions opt;
  opt.dropout = DropoutSpec{0.1, 8, 0};
  addnorm::add_norm_forward<float>(View2D<float>(s.data(), rows, d), View2D<float>(y.data(), rows, d), mean, rstd,
                                   View2D<const float>(h.data(), rows, d), View2D<const float>(f.data(), rows, d),
                                   gamma, {}, opt);
  const int before = addnorm::num_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    addnorm::set_num_threads(threads);
    std::vector<float> dh(n), df(n), dgamma(d, 0.0f), dbeta(d, 0.0f);
    addnorm::add_norm_backward<float>(View2D<float>(dh.data(), rows, d), View2D<float>(df.data(), rows, d), dgamma,
                                      dbeta, View2D<const float>(dy.data(), rows, d),
                                      View2D<const float>(ds.data(), rows, d), View2D<const float>(s.data(), rows, d),
                                      mean, rstd, gamma, opt);
    dgamma.insert(dgamma.end(), dbeta.begin(), dbeta.end());
    results.push_back(dgamma);
  }
  addnorm::set_num_threads(before);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(ReZero, ForwardBackwardAndFiniteDifferences) {
  const int64_t rows = 4, d = 9;
  const size_t n = rows * d;
  auto h = seeded_vector<double>(n, 1), f = seeded_vector<double>(n, 2), ws = seeded_vector<double>(n, 3);
  const DropoutSpec drop{0.2, 7, 5};
  const double a = 0.37;
  std::vector<double> s(n);
  addnorm::rezero_forward<double>(View2D<double>(s.data(), rows, d), View2D<const double>(h.data(), rows, d),
                                  View2D<const double>(f.data(), rows, d), a, drop);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(s[i], h[i] + (drop.keep(i) ? a * f[i] / 0.8 : 0.0), 1e-15);
  std::vector<double> dh(n), df(n);
  double da = 0.5;  // accumulates
  addnorm::rezero_backward<double>(View2D<double>(dh.data(), rows, d), View2D<double>(df.data(), rows, d), da,
                                   View2D<const double>(ws.data(), rows, d), View2D<const double>(f.data(), rows, d), a,
                                   drop);
  auto loss = [&](double aa) {
    std::vector<double> ss(n);
    addnorm::rezero_forward<double>(View2D<double>(ss.data(), rows, d), View2D<const double>(h.data(), rows, d),
                                    View2D<const double>(f.data(), rows, d), aa, drop);
    double l = 0;
    for (size_t i = 0; i < n; ++i) l += ws[i] * ss[i];
    return l;
  };
  EXPECT_NEAR(da - 0.5, (loss(a + 1e-6) - loss(a - 1e-6)) / 2e-6, 1e-8);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(dh[i], ws[i]);
    EXPECT_NEAR(df[i], drop.keep(i) ? a * ws[i] / 0.8 : 0.0, 1e-15);
  }
}

TEST(AddNorm, ErrorsNameTheFunction) {
  std::vector<float> a(8), b(8), y(8), r(2), m(2);
  const View2D<const float> in(a.data(), 2, 4);
  AddNormOptions opt;
  auto fwd = [&](const AddNormOptions& o, std::span<const float> gamma, std::span<float> mean) {
    addnorm::add_norm_forward<float>(View2D<float>(b.data(), 2, 4), View2D<float>(y.data(), 2, 4), mean, r, in, in,
                                     gamma, {}, o);
  };
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const addnorm::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  opt.eps = 0;
  EXPECT_EQ(message([&] { fwd(opt, {}, m); }), "[add_norm_forward] eps must be finite and > 0, got 0");
  opt.eps = 1e-5;
  opt.dropout.p = 2;
  EXPECT_EQ(message([&] { fwd(opt, {}, m); }), "[add_norm_forward] dropout p must be in [0, 1], got 2");
  opt.dropout.p = 0;
  std::vector<float> g3(3);
  EXPECT_EQ(message([&] { fwd(opt, g3, m); }), "[add_norm_forward] gamma has 3 elements, expected 4");
  opt.kind = NormKind::rms;
  EXPECT_EQ(message([&] { fwd(opt, {}, m); }), "[add_norm_forward] rms norm has no mean to save");
}

}  // namespace
