// Every SIMD target the CPU supports (avx512bf16, avx512, avx2, generic), for every element type
// (f32, f64, bf16, f16): LayerNorm and RMSNorm forward/backward and the fused Add & Norm against the f64
// reference, on a sweep of widths (tails of every length), strided and misaligned rows, and
// outputs large enough to take the streaming-store path.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::bf16;
using addnorm::f16;
using addnorm::View2D;
using addnorm::testing::dtype_name;

// Allowed error relative to max(1, |ref|): a few roundings of the output type.
template <class T>
double tol() {
  if constexpr (std::is_same_v<T, float>) return 3e-6;
  if constexpr (std::is_same_v<T, double>) return 1e-13;
  if constexpr (std::is_same_v<T, bf16>) return 8e-3;
  return 1.5e-3;
}

// A (rows, d) matrix of T with row stride `stride`, starting `shift` elements into its buffer.
template <class T>
struct Mat {
  std::vector<T> buf;
  int64_t rows, d, stride, shift;
  Mat(int64_t r, int64_t cols, int64_t st, int64_t sh, unsigned seed, double mean, double sd)
      : buf(static_cast<size_t>(sh + r * st + 1)), rows(r), d(cols), stride(st), shift(sh) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> dist(mean, sd);
    for (auto& v : buf) v = static_cast<T>(dist(gen));
  }
  View2D<T> view() { return View2D<T>(buf.data() + shift, rows, d, stride); }
  View2D<const T> cview() const { return View2D<const T>(buf.data() + shift, rows, d, stride); }
  double at(int64_t r, int64_t c) const {
    return static_cast<double>(buf[static_cast<size_t>(shift + r * stride + c)]);
  }
};

// row_scale (optional): a per-row magnitude of the terms that make up the result, for results that
// are differences of larger terms (the backward's g - mean(g) - x_hat * mean(g * x_hat), times rstd).
template <class T>
::testing::AssertionResult close(const Mat<T>& got, const std::vector<double>& ref, const char* what,
                                 const std::vector<double>& row_scale = {}) {
  for (int64_t r = 0; r < got.rows; ++r)
    for (int64_t c = 0; c < got.d; ++c) {
      const double want = ref[static_cast<size_t>(r * got.d + c)];
      const double err = std::abs(got.at(r, c) - want);
      const double scale = row_scale.empty() ? 1.0 : std::max(1.0, row_scale[static_cast<size_t>(r)]);
      if (!(err <= tol<T>() * std::max(scale, std::abs(want))))
        return ::testing::AssertionFailure() << what << "(" << r << ", " << c << ") = " << got.at(r, c)
                                             << ", reference " << want << ", error " << err;
    }
  return ::testing::AssertionSuccess();
}

template <class T>
::testing::AssertionResult close_vec(const std::vector<T>& got, const std::vector<double>& ref, double scale,
                                     const char* what) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= tol<T>() * scale * std::max(1.0, std::abs(ref[i]))))
      return ::testing::AssertionFailure()
             << what << "[" << i << "] = " << static_cast<double>(got[i]) << ", reference " << ref[i];
  }
  return ::testing::AssertionSuccess();
}

// The inputs rounded to T, so the reference sees exactly what the kernel sees.
template <class T>
std::vector<T> params(int64_t d, unsigned seed, double mean) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(mean, 0.5);
  std::vector<T> v(static_cast<size_t>(d));
  for (auto& e : v) e = static_cast<T>(dist(gen));
  return v;
}

// rstd * max |dy * gamma| per row: the size of the terms of dx.
template <class T>
std::vector<double> dx_scale(const std::vector<double>& rstd, const Mat<T>& dy, const std::vector<T>& gamma) {
  std::vector<double> out(rstd.size());
  for (int64_t r = 0; r < dy.rows; ++r) {
    double m = 0;
    for (int64_t c = 0; c < dy.d; ++c) m = std::max(m, std::abs(dy.at(r, c) * static_cast<double>(gamma[c])));
    out[static_cast<size_t>(r)] = rstd[static_cast<size_t>(r)] * m * 4;
  }
  return out;
}

template <class T>
void check_case(int64_t rows, int64_t d, int64_t pad, int64_t shift, double mean) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(std::string(dtype_name<T>()) + " target " + addnorm::simd_target() + " rows " + std::to_string(rows) +
               " d " + std::to_string(d) + " pad " + std::to_string(pad) + " shift " + std::to_string(shift) +
               " mean " + std::to_string(mean));
  const int64_t st = d + pad;
  Mat<T> x(rows, d, st, shift, 1, mean, 2.0), dy(rows, d, st, shift, 2, 0.0, 1.0), y(rows, d, st, shift, 3, 0, 1),
      dx(rows, d, st, shift, 4, 0, 1);
  const auto gamma = params<T>(d, 5, 1.0), beta = params<T>(d, 6, 0.0);
  std::vector<S> mean_s(static_cast<size_t>(rows)), rstd_s(static_cast<size_t>(rows));
  std::vector<T> dgamma(static_cast<size_t>(d), T(0)), dbeta(static_cast<size_t>(d), T(0));
  const double eps = 1e-5;

  addnorm::layer_norm_forward<T>(y.view(), mean_s, rstd_s, x.cview(), gamma, beta, eps);
  const auto f = addnorm::ref::layer_norm_forward<T>(x.cview(), gamma, beta, eps);
  EXPECT_TRUE(close(y, f.y, "layer y"));
  addnorm::layer_norm_backward<T>(dx.view(), dgamma, dbeta, dy.cview(), x.cview(), mean_s, rstd_s, gamma);
  const auto b = addnorm::ref::layer_norm_backward<T>(dy.cview(), x.cview(), gamma, eps);
  EXPECT_TRUE(close(dx, b.dx, "layer dx", dx_scale(f.rstd, dy, gamma)));
  const double rs = std::sqrt(static_cast<double>(rows)) * 4;
  EXPECT_TRUE(close_vec(dgamma, b.dgamma, rs, "layer dgamma"));
  EXPECT_TRUE(close_vec(dbeta, b.dbeta, rs, "layer dbeta"));

  std::fill(dgamma.begin(), dgamma.end(), T(0));
  addnorm::rms_norm_forward<T>(y.view(), rstd_s, x.cview(), gamma, eps);
  const auto fr = addnorm::ref::rms_norm_forward<T>(x.cview(), gamma, eps);
  EXPECT_TRUE(close(y, fr.y, "rms y"));
  addnorm::rms_norm_backward<T>(dx.view(), dgamma, dy.cview(), x.cview(), rstd_s, gamma);
  const auto br = addnorm::ref::rms_norm_backward<T>(dy.cview(), x.cview(), gamma, eps);
  EXPECT_TRUE(close(dx, br.dx, "rms dx", dx_scale(fr.rstd, dy, gamma)));
  EXPECT_TRUE(close_vec(dgamma, br.dgamma, rs, "rms dgamma"));

  // Fused pre-norm with dropout: s against alpha * h + keep * f, y against the reference of s.
  addnorm::AddNormOptions opt;
  opt.alpha = 1.5;
  opt.dropout = addnorm::DropoutSpec{0.25, 7, 3};
  Mat<T> s(rows, d, st, shift, 8, 0, 1);
  addnorm::add_norm_forward<T>(s.view(), y.view(), mean_s, rstd_s, x.cview(), dy.cview(), gamma, beta, opt);
  std::vector<double> s_ref(static_cast<size_t>(rows * d));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const auto i = static_cast<uint64_t>(r * d + c);
      s_ref[i] = 1.5 * x.at(r, c) + (opt.dropout.keep(i) ? dy.at(r, c) / 0.75 : 0.0);
    }
  EXPECT_TRUE(close(s, s_ref, "fused s"));
  const auto fs = addnorm::ref::layer_norm_forward<T>(s.cview(), gamma, beta, eps);
  EXPECT_TRUE(close(y, fs.y, "fused y"));

  // Its backward from s and the saved statistics, with a gradient on the residual stream (ds):
  // t = LayerNorm's dx at s + ds, dh = alpha * t, df = keep * t / (1 - p).
  Mat<T> ds(rows, d, st, shift, 9, 0.0, 1.0), dh(rows, d, st, shift, 10, 0, 1), df(rows, d, st, shift, 11, 0, 1);
  std::fill(dgamma.begin(), dgamma.end(), T(0));
  std::fill(dbeta.begin(), dbeta.end(), T(0));
  addnorm::add_norm_backward<T>(dh.view(), df.view(), dgamma, dbeta, dy.cview(), ds.cview(), s.cview(), mean_s, rstd_s,
                                gamma, opt);
  const auto fb = addnorm::ref::layer_norm_backward<T>(dy.cview(), s.cview(), gamma, eps);
  std::vector<double> dh_ref(s_ref.size()), df_ref(s_ref.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const auto i = static_cast<size_t>(r * d + c);
      const double t = fb.dx[i] + ds.at(r, c);
      dh_ref[i] = 1.5 * t;
      df_ref[i] = opt.dropout.keep(static_cast<uint64_t>(i)) ? t / 0.75 : 0.0;
    }
  auto fused_scale = dx_scale(fs.rstd, dy, gamma);
  for (double& v : fused_scale) v *= 2;  // (dh and df are t times 1.5 and 1 / 0.75)
  EXPECT_TRUE(close(dh, dh_ref, "fused dh", fused_scale));
  EXPECT_TRUE(close(df, df_ref, "fused df", fused_scale));
  EXPECT_TRUE(close_vec(dgamma, fb.dgamma, rs, "fused dgamma"));
  EXPECT_TRUE(close_vec(dbeta, fb.dbeta, rs, "fused dbeta"));

  // Post-norm RMSNorm without dropout: y = RMSNorm(h + f), dh = df = RMSNorm's dx at s.
  addnorm::AddNormOptions post;
  post.kind = addnorm::NormKind::rms;
  addnorm::add_norm_forward<T>(s.view(), y.view(), {}, rstd_s, x.cview(), dy.cview(), gamma, {}, post);
  std::fill(dgamma.begin(), dgamma.end(), T(0));
  addnorm::add_norm_backward<T>(dh.view(), df.view(), dgamma, {}, ds.cview(), {}, s.cview(), {}, rstd_s, gamma, post);
  const auto rs_fwd = addnorm::ref::rms_norm_forward<T>(s.cview(), gamma, eps);
  const auto rb = addnorm::ref::rms_norm_backward<T>(ds.cview(), s.cview(), gamma, eps);
  EXPECT_TRUE(close(dh, rb.dx, "post-norm rms dh", dx_scale(rs_fwd.rstd, ds, gamma)));
  EXPECT_TRUE(close(df, rb.dx, "post-norm rms df", dx_scale(rs_fwd.rstd, ds, gamma)));
  EXPECT_TRUE(close_vec(dgamma, rb.dgamma, rs, "post-norm rms dgamma"));
}

// A bf16/f16 model with an f32 residual stream: h, s, ds and dh are float, f, y, dy and df are T.
template <class T>
void check_f32_stream(int64_t rows, int64_t d) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(std::string(dtype_name<T>()) + " with f32 stream, target " + addnorm::simd_target() + " d " +
               std::to_string(d));
  Mat<float> h(rows, d, d, 0, 1, 3.0, 2.0), ds(rows, d, d, 0, 2, 0, 1), s(rows, d, d, 0, 3, 0, 1),
      dh(rows, d, d, 0, 4, 0, 1);
  Mat<T> f(rows, d, d, 0, 5, 0, 1), dy(rows, d, d, 0, 6, 0, 1), y(rows, d, d, 0, 7, 0, 1), df(rows, d, d, 0, 8, 0, 1);
  const auto gamma = params<T>(d, 9, 1.0), beta = params<T>(d, 10, 0.0);
  std::vector<float> gamma_f(gamma.size()), beta_f(beta.size());
  for (size_t i = 0; i < gamma.size(); ++i) {
    gamma_f[i] = static_cast<float>(gamma[i]);
    beta_f[i] = static_cast<float>(beta[i]);
  }
  std::vector<S> mean_s(static_cast<size_t>(rows)), rstd_s(static_cast<size_t>(rows));
  addnorm::AddNormOptions opt;
  opt.dropout = addnorm::DropoutSpec{0.1, 11, 0};
  addnorm::add_norm_forward<T, float>(s.view(), y.view(), mean_s, rstd_s, h.cview(), f.cview(), gamma, beta, opt);
  std::vector<double> s_ref(static_cast<size_t>(rows * d));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const auto i = static_cast<uint64_t>(r * d + c);
      s_ref[i] = h.at(r, c) + (opt.dropout.keep(i) ? f.at(r, c) / 0.9 : 0.0);
    }
  EXPECT_TRUE(close(s, s_ref, "f32 stream s"));
  const auto fwd = addnorm::ref::layer_norm_forward<float>(s.cview(), gamma_f, beta_f, opt.eps);
  EXPECT_TRUE(close(y, fwd.y, "f32 stream y"));

  std::vector<T> dgamma(static_cast<size_t>(d), T(0)), dbeta(static_cast<size_t>(d), T(0));
  addnorm::add_norm_backward<T, float>(dh.view(), df.view(), dgamma, dbeta, dy.cview(), ds.cview(), s.cview(), mean_s,
                                       rstd_s, gamma, opt);
  std::vector<float> dy_f(static_cast<size_t>(rows * d));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) dy_f[static_cast<size_t>(r * d + c)] = static_cast<float>(dy.at(r, c));
  const auto bwd =
      addnorm::ref::layer_norm_backward<float>(View2D<const float>(dy_f.data(), rows, d), s.cview(), gamma_f, opt.eps);
  std::vector<double> dh_ref(bwd.dx.size()), df_ref(bwd.dx.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const auto i = static_cast<size_t>(r * d + c);
      dh_ref[i] = bwd.dx[i] + ds.at(r, c);
      df_ref[i] = opt.dropout.keep(i) ? dh_ref[i] / 0.9 : 0.0;
    }
  Mat<float> dy_mat(rows, d, d, 0, 0, 0, 1);
  dy_mat.buf.assign(dy_f.begin(), dy_f.end());
  dy_mat.buf.push_back(0);
  EXPECT_TRUE(close(dh, dh_ref, "f32 stream dh", dx_scale(fwd.rstd, dy_mat, gamma_f)));
  EXPECT_TRUE(close(df, df_ref, "f32 stream df"));
  EXPECT_TRUE(close_vec(dgamma, bwd.dgamma, std::sqrt(static_cast<double>(rows)) * 4, "f32 stream dgamma"));
}

template <class T>
void sweep() {
  for (int64_t d : {1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 768, 1000})
    for (auto [pad, shift] : {std::pair<int64_t, int64_t>{0, 0}, {3, 1}})
      check_case<T>(5, d, pad, shift, d % 2 == 0 ? 0.0 : 100.0);
  check_case<T>(1, 4099, 0, 1, 3.0);
}

// Each test runs on the target it is given and restores the one before it when it ends.
class Dispatch : public ::testing::TestWithParam<std::string> {
  addnorm::testing::ScopedSimdTarget target_{GetParam()};
};

TEST_P(Dispatch, F32) { sweep<float>(); }
TEST_P(Dispatch, F64) { sweep<double>(); }
TEST_P(Dispatch, BF16) { sweep<bf16>(); }
TEST_P(Dispatch, F16) { sweep<f16>(); }
TEST_P(Dispatch, F32ResidualStream) {
  for (int64_t d : {1, 5, 64, 100, 1031}) {
    check_f32_stream<bf16>(6, d);
    check_f32_stream<f16>(6, d);
  }
}

// Outputs above 8 MiB are written with streaming stores; misaligned and aligned starts.
TEST_P(Dispatch, StreamingStoresF32) {
  check_case<float>(1100, 2048, 0, 0, 1.0);
  check_case<float>(1100, 2048, 5, 3, 1.0);
}
TEST_P(Dispatch, StreamingStoresBF16) { check_case<bf16>(2200, 2048, 0, 1, 1.0); }
// Rows of 1-4 KiB stream too (300 f32 = 1200 bytes; 9000 rows = 10.8 MB), next to unstreamed rows
// of 800 bytes.
TEST_P(Dispatch, StreamingStoresShortRows) {
  check_case<float>(9000, 300, 0, 0, 1.0);
  check_case<float>(9000, 300, 1, 2, 1.0);
  check_case<float>(11000, 200, 0, 0, 1.0);
}

// The f32 statistics take the row's first 16 elements as the shift; rows whose head is far from
// their mean (against the spread) are redone with the mean as the shift. Each row here has such a
// head (1e3 + noise, then a long tail of noise around -2), and a few ratios mean / std.
template <class T>
void check_far_head(int64_t d, double tail_mean) {
  SCOPED_TRACE(std::string(dtype_name<T>()) + " target " + addnorm::simd_target() + " d " + std::to_string(d) +
               " tail mean " + std::to_string(tail_mean));
  const int64_t rows = 4;
  Mat<T> x(rows, d, d, 0, 11, tail_mean, 1.0), y(rows, d, d, 0, 12, 0, 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 16; ++c)
      x.buf[static_cast<size_t>(r * d + c)] = static_cast<T>(1e3 + static_cast<double>(c));
  const auto gamma = params<T>(d, 5, 1.0), beta = params<T>(d, 6, 0.0);
  std::vector<addnorm::stat_t<T>> mean_s(rows), rstd_s(rows);
  addnorm::layer_norm_forward<T>(y.view(), mean_s, rstd_s, x.cview(), gamma, beta, 1e-5);
  const auto f = addnorm::ref::layer_norm_forward<T>(x.cview(), gamma, beta, 1e-5);
  EXPECT_TRUE(close(y, f.y, "far-head y"));
  for (int64_t r = 0; r < rows; ++r) {
    const auto i = static_cast<size_t>(r);
    EXPECT_NEAR(static_cast<double>(mean_s[i]), f.mean[i], 4 * tol<T>() * std::max(1.0, std::abs(f.mean[i])));
    EXPECT_NEAR(static_cast<double>(rstd_s[i]), f.rstd[i], 4 * tol<T>() * f.rstd[i]);
  }
}

TEST_P(Dispatch, StatisticsWithAFarHead) {
  for (int64_t d : {4096, 1000, 100})
    for (double tail : {-2.0, 0.0, 5e2}) {
      check_far_head<float>(d, tail);
      check_far_head<bf16>(d, tail);
    }
}

// bf16 stores: avx512bf16 packs with vcvtneps2bf16, which flushes denormals to zero; a vector that
// holds one takes the integer rounding instead. Outputs of about 1e-39 (bf16 denormals) must come
// out bit for bit the same on every target, and as the scalar rounding of the f32 value would give
// (bf16's own conversion); a NaN row must come out NaN on every target.
// d = 100: three pairs of vectors (store_vec2) and a tail of 4; d = 116: three pairs, one vector
// (store_vec) and a tail of 4.
void check_bf16_denormal_outputs(int64_t d) {
  SCOPED_TRACE("d " + std::to_string(d));
  const int64_t rows = 3;
  Mat<bf16> x(rows, d, d, 0, 21, 0.0, 1.0);
  x.buf[static_cast<size_t>(2 * d + 7)] = bf16(std::nanf(""));
  std::vector<bf16> gamma(static_cast<size_t>(d)), beta(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) {
    gamma[static_cast<size_t>(c)] = bf16(c % 3 == 0 ? 1.0 : 3e-39);  // every vector holds denormal outputs
    beta[static_cast<size_t>(c)] = bf16(c % 3 == 0 ? 0.5 : 0.0);
  }
  std::vector<std::vector<uint16_t>> bits;
  int denormals = 0;
  addnorm::testing::for_each_simd_target([&] {
    Mat<bf16> y(rows, d, d, 0, 22, 0, 1);
    std::vector<float> mean(rows), rstd(rows);
    addnorm::layer_norm_forward<bf16>(y.view(), mean, rstd, x.cview(), gamma, beta, 1e-5);
    std::vector<uint16_t> b;
    denormals = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) {
        const bf16 v = y.buf[static_cast<size_t>(r * d + c)];
        // A NaN's sign is not specified: it comes from whichever operand's NaN an instruction
        // passes on, and operand order is the compiler's (the generic target under the sanitizers
        // gives -NaN where the others give +NaN). NaNs are compared as NaNs.
        b.push_back(std::isnan(static_cast<float>(v)) ? uint16_t{0x7fc0} : v.bits);
        if ((v.bits & 0x7f80u) == 0 && (v.bits & 0x7fu) != 0) ++denormals;
        if (r < 2) {  // the same rounding as bf16(float), from the saved statistics
          const float xv = static_cast<float>(x.buf[static_cast<size_t>(r * d + c)]);
          const float want = (xv - mean[static_cast<size_t>(r)]) * rstd[static_cast<size_t>(r)] *
                                 static_cast<float>(gamma[static_cast<size_t>(c)]) +
                             static_cast<float>(beta[static_cast<size_t>(c)]);
          if (std::abs(want) < 1e-37f) {
            EXPECT_NEAR(static_cast<double>(static_cast<float>(v)), want, 4.6e-41);  // half a denormal step
          }
        }
      }
    for (int64_t c = 0; c < d; ++c) EXPECT_TRUE(std::isnan(static_cast<float>(y.buf[static_cast<size_t>(2 * d + c)])));
    bits.push_back(std::move(b));
  });
  EXPECT_GT(denormals, 50);
  for (size_t t = 1; t < bits.size(); ++t) EXPECT_EQ(bits[t], bits[0]) << "target " << t << " differs from the first";
}

TEST(DispatchBf16, DenormalAndNanOutputsAreTheSameOnEveryTarget) {
  check_bf16_denormal_outputs(100);
  check_bf16_denormal_outputs(116);
}

// A NaN must be stored to bf16 as a NaN on every target, whatever its payload. Without AVX512-BF16
// the store rounds with integer operations, which carry a NaN with the low mantissa bits set into
// the sign and beyond (0x7fffffff would round to -0, 0xffffffff to +0); a vector holding a NaN takes
// the form that quiets it instead. bf16 data cannot carry such payloads (their low 16 bits are zero),
// f32 data can: the fused Add & Norm with an f32 residual stream takes f32 NaNs to bf16 y, and its
// backward f32 ds to bf16 df. d = 100: pairs of vectors (store_vec2) and a tail; d = 116: pairs,
// one vector (store_vec) and a tail.
void check_bf16_nan_payloads(int64_t d, addnorm::NormKind kind) {
  SCOPED_TRACE("d " + std::to_string(d) + (kind == addnorm::NormKind::layer ? " layer" : " rms"));
  const int64_t rows = 3;
  const auto nan_bits = [](uint32_t u) { return std::bit_cast<float>(u); };
  Mat<float> h(rows, d, d, 0, 31, 0.0, 1.0), ds(rows, d, d, 0, 32, 0.0, 1.0);
  h.buf[static_cast<size_t>(d + 7)] = nan_bits(0x7fffffffu);
  h.buf[static_cast<size_t>(2 * d + 3)] = nan_bits(0xffffffffu);
  for (int64_t c = 0; c < d; c += 5) ds.buf[static_cast<size_t>(c)] = nan_bits(c % 2 ? 0x7fffffffu : 0xffffffffu);
  const Mat<bf16> f(rows, d, d, 0, 33, 0.0, 1.0), dy(rows, d, d, 0, 34, 0.0, 1.0);
  const std::vector<bf16> gamma(static_cast<size_t>(d), bf16(1.5)), beta(static_cast<size_t>(d), bf16(0.25));
  addnorm::AddNormOptions opt;
  opt.kind = kind;
  const bool layer = kind == addnorm::NormKind::layer;
  addnorm::testing::for_each_simd_target([&] {
    Mat<float> s(rows, d, d, 0, 35, 0, 1), dh(rows, d, d, 0, 36, 0, 1);
    Mat<bf16> y(rows, d, d, 0, 37, 0, 1), df(rows, d, d, 0, 38, 0, 1);
    std::vector<float> mean(layer ? rows : 0), rstd(rows);
    addnorm::add_norm_forward<bf16, float>(s.view(), y.view(), mean, rstd, h.cview(), f.cview(), gamma,
                                           layer ? std::span<const bf16>(beta) : std::span<const bf16>{}, opt);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) {
        // Row 0 is finite; in rows 1 and 2 every output is a NaN (the row's statistics are).
        const double v = y.at(r, c);
        if (r == 0)
          ASSERT_TRUE(std::isfinite(v)) << "y(0, " << c << ") = " << v;
        else
          ASSERT_TRUE(std::isnan(v)) << "y(" << r << ", " << c << ") = " << v;
      }
    std::vector<bf16> dgamma(static_cast<size_t>(d), bf16(0)), dbeta(static_cast<size_t>(d), bf16(0));
    // Row 0 only: its statistics are finite, so df(0, c) is a NaN exactly where ds(0, c) is.
    const auto row0 = [d](auto& m) { return decltype(m.view())(m.buf.data(), 1, d, d); };
    const auto crow0 = [d](const auto& m) { return decltype(m.cview())(m.buf.data(), 1, d, d); };
    addnorm::add_norm_backward<bf16, float>(
        row0(dh), row0(df), dgamma, layer ? std::span<bf16>(dbeta) : std::span<bf16>{}, crow0(dy), crow0(ds), crow0(s),
        std::span<const float>(mean).first(layer ? 1 : 0), std::span<const float>(rstd).first(1), gamma, opt);
    for (int64_t c = 0; c < d; ++c) {
      ASSERT_EQ(std::isnan(df.at(0, c)), c % 5 == 0) << "df(0, " << c << ") = " << df.at(0, c);
      ASSERT_EQ(std::isnan(dh.at(0, c)), c % 5 == 0) << "dh(0, " << c << ") = " << dh.at(0, c);
    }
  });
}

TEST(DispatchBf16, NanPayloadsStayNanOnEveryTarget) {
  for (const auto kind : {addnorm::NormKind::layer, addnorm::NormKind::rms}) {
    check_bf16_nan_payloads(100, kind);
    check_bf16_nan_payloads(116, kind);
  }
}

// LayerNorm forward takes rows in batches of up to 16 (ln_forward_rows, 32 KiB a batch), their
// statistics in vector lanes; RMSNorm forward takes the same batches (rms_forward_rows). Each must
// give the same bits as the one-row kernel, which the fused Add & Norm runs on s = h + 0. Counts of 1-37 rows cover
// partial batches; one row in five has a head far from its mean (the row is redone on its own), one holds an Inf (done
// in double). add_norm_forward one row per call, which takes the one-row kernel (a call of one row is not batched); the
// dropout stream goes on at offset r * d as in a call over all rows.
template <class T>
void fused_row_by_row(Mat<T>& s, Mat<T>& y, std::vector<addnorm::stat_t<T>>& mean,
                      std::vector<addnorm::stat_t<T>>& rstd, const Mat<T>& h, const Mat<T>& f,
                      const std::vector<T>& gamma, const std::vector<T>& beta, const addnorm::AddNormOptions& o) {
  const int64_t d = h.d;
  const auto row = [d](auto& m, int64_t r) { return View2D<T>(m.buf.data() + m.shift + r * m.stride, 1, d); };
  const auto crow = [d](const Mat<T>& m, int64_t r) {
    return View2D<const T>(m.buf.data() + m.shift + r * m.stride, 1, d);
  };
  for (int64_t r = 0; r < h.rows; ++r) {
    addnorm::AddNormOptions one = o;
    one.dropout.offset = o.dropout.offset + static_cast<uint64_t>(r * d);
    const bool layer = o.kind == addnorm::NormKind::layer;
    addnorm::add_norm_forward<T>(
        row(s, r), row(y, r),
        layer ? std::span(mean).subspan(static_cast<size_t>(r), 1) : std::span<addnorm::stat_t<T>>{},
        std::span(rstd).subspan(static_cast<size_t>(r), 1), crow(h, r), crow(f, r), gamma,
        layer ? std::span<const T>(beta) : std::span<const T>{}, one);
  }
}

template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& a, const std::vector<T>& b, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(a[i]), v = static_cast<double>(b[i]);
    if (!(u == v || (std::isnan(u) && std::isnan(v))))
      return ::testing::AssertionFailure() << what << ", element " << i << ": " << u << " vs " << v;
  }
  return ::testing::AssertionSuccess();
}

template <class T>
void check_batched_rows_match_one_row(int64_t rows, int64_t d) {
  SCOPED_TRACE(std::string(dtype_name<T>()) + " target " + addnorm::simd_target() + " rows " + std::to_string(rows) +
               " d " + std::to_string(d));
  using S = addnorm::stat_t<T>;
  Mat<T> h(rows, d, d, 0, 31, 0.5, 2.0), zero(rows, d, d, 0, 32, 0, 0), f(rows, d, d, 0, 36, -0.3, 1.5),
      y1(rows, d, d, 0, 33, 0, 1), y2(rows, d, d, 0, 34, 0, 1), s1(rows, d, d, 0, 35, 0, 1),
      s2(rows, d, d, 0, 37, 0, 1);
  for (int64_t r = 0; r < rows; r += 5)
    for (int64_t c = 0; c < 16; ++c)
      h.buf[static_cast<size_t>(r * d + c)] = static_cast<T>(300.0 + static_cast<double>(c));
  if (rows > 3) h.buf[static_cast<size_t>(3 * d + d / 2)] = static_cast<T>(INFINITY);
  const auto gamma = params<T>(d, 7, 1.0), beta = params<T>(d, 8, 0.0);
  const auto n = static_cast<size_t>(rows);
  std::vector<S> m1(n), r1(n), m2(n), r2(n);
  const size_t all = static_cast<size_t>(rows * d);  // (buf has one element more)

  // LayerNorm's batches (ln_forward_rows) against the fused kernel's one-row LayerNorm (f = 0).
  addnorm::layer_norm_forward<T>(y1.view(), m1, r1, h.cview(), gamma, beta, 1e-5);
  fused_row_by_row<T>(s2, y2, m2, r2, h, zero, gamma, beta, {});
  ASSERT_TRUE(same_bits(y1.buf, y2.buf, all, "LayerNorm y"));
  EXPECT_TRUE(same_bits(m1, m2, n, "LayerNorm mean"));
  EXPECT_TRUE(same_bits(r1, r2, n, "LayerNorm rstd"));

  // RMSNorm: its batches (rms_forward_rows) against the fused kernel's one-row rms_forward (f = 0).
  addnorm::AddNormOptions rms;
  rms.kind = addnorm::NormKind::rms;
  addnorm::rms_norm_forward<T>(y1.view(), r1, h.cview(), gamma, rms.eps);
  fused_row_by_row<T>(s2, y2, m2, r2, h, zero, gamma, beta, rms);
  ASSERT_TRUE(same_bits(y1.buf, y2.buf, all, "RMSNorm y"));
  EXPECT_TRUE(same_bits(r1, r2, n, "RMSNorm rstd"));

  // The fused forward with dropout over all rows, batched when the rows are short, against the same
  // one row at a time: residual stream, output and statistics, LayerNorm and RMSNorm. For rows of
  // 1 KiB or more (not batched) a large call streams its outputs and a one-row call does not, which
  // moves the row's scalar/vector split: this fails when the scalar and the vector form of
  // h + keep * f round differently (as they did under the sanitizer build before residual_at
  // wrote its FMA out).
  addnorm::AddNormOptions drop;
  drop.dropout = {0.1, 99, 12345};
  addnorm::add_norm_forward<T>(s1.view(), y1.view(), m1, r1, h.cview(), f.cview(), gamma, beta, drop);
  fused_row_by_row<T>(s2, y2, m2, r2, h, f, gamma, beta, drop);
  ASSERT_TRUE(same_bits(s1.buf, s2.buf, all, "fused LayerNorm s"));
  ASSERT_TRUE(same_bits(y1.buf, y2.buf, all, "fused LayerNorm y"));
  EXPECT_TRUE(same_bits(m1, m2, n, "fused LayerNorm mean"));
  EXPECT_TRUE(same_bits(r1, r2, n, "fused LayerNorm rstd"));
  // Without dropout (the residual built without keep factors; wide f32 rows rebuild it).
  addnorm::add_norm_forward<T>(s1.view(), y1.view(), m1, r1, h.cview(), f.cview(), gamma, beta, {});
  fused_row_by_row<T>(s2, y2, m2, r2, h, f, gamma, beta, {});
  ASSERT_TRUE(same_bits(s1.buf, s2.buf, all, "fused LayerNorm s, no dropout"));
  ASSERT_TRUE(same_bits(y1.buf, y2.buf, all, "fused LayerNorm y, no dropout"));
  EXPECT_TRUE(same_bits(m1, m2, n, "fused LayerNorm mean, no dropout"));
  EXPECT_TRUE(same_bits(r1, r2, n, "fused LayerNorm rstd, no dropout"));
  rms.dropout = drop.dropout;
  addnorm::add_norm_forward<T>(s1.view(), y1.view(), {}, r1, h.cview(), f.cview(), gamma, {}, rms);
  fused_row_by_row<T>(s2, y2, m2, r2, h, f, gamma, beta, rms);
  ASSERT_TRUE(same_bits(s1.buf, s2.buf, all, "fused RMSNorm s"));
  ASSERT_TRUE(same_bits(y1.buf, y2.buf, all, "fused RMSNorm y"));
  EXPECT_TRUE(same_bits(r1, r2, n, "fused RMSNorm rstd"));
}

TEST_P(Dispatch, BatchedRowsMatchTheOneRowKernel) {
  // d = 64 and 128: compiled for their width; 700 and 2100: 16 and 3 f32 rows a batch (7 and 16
  // bf16); 4100 f32: row by row.
  for (int64_t rows : {1, 15, 16, 17, 37})
    for (int64_t d : {16, 64, 100, 128, 255, 700, 2100, 4100}) {
      check_batched_rows_match_one_row<float>(rows, d);
      check_batched_rows_match_one_row<bf16>(rows, d);
    }
  // Streamed outputs (over 8 MiB) of rows under 2 KiB: batches that prefetch the next batch's rows.
  check_batched_rows_match_one_row<bf16>(6100, 700);
  check_batched_rows_match_one_row<float>(7200, 300);
  // Streamed short rows: the fused forward's batches (d * sizeof(T) < 1 KiB; f32 ones prefetch).
  check_batched_rows_match_one_row<bf16>(33000, 100);
  check_batched_rows_match_one_row<float>(20000, 100);
  // Streamed rows of 64 and 128 (a LayerNorm batch's output pass inlined, streaming) and streamed
  // batches of the longest rows that take them (2 KiB f32, 3 KiB bf16; norm_batch_rows).
  check_batched_rows_match_one_row<bf16>(66000, 64);
  check_batched_rows_match_one_row<float>(16500, 128);
  check_batched_rows_match_one_row<float>(4200, 512);
  check_batched_rows_match_one_row<bf16>(2800, 1536);
  // Streamed rows of 4096 or more elements: every other row walks its last pass backward.
  check_batched_rows_match_one_row<float>(600, 4100);
  check_batched_rows_match_one_row<bf16>(1100, 4100);
}

// BatchNorm forward and backward against the f64 reference, in every element type: rows of 64 and
// 128 take the batch kernels (bn_forward_rows, bn_backward_rows: constants in registers), the
// others the row kernels; with a mask (padding rows hold NaN and must come out +0) and without.
template <class T>
void check_batch_norm(int64_t rows, int64_t d, bool masked) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(std::string(dtype_name<T>()) + " target " + addnorm::simd_target() + " batch_norm rows " +
               std::to_string(rows) + " d " + std::to_string(d) + (masked ? " masked" : ""));
  Mat<T> x(rows, d, d + 5, 3, 41, 1.5, 2.0), y(rows, d, d + 5, 3, 42, 0, 1);
  std::vector<uint8_t> mask;
  if (masked) {
    mask.assign(static_cast<size_t>(rows), 1);
    for (int64_t r = 1; r < rows; r += 3) {
      mask[static_cast<size_t>(r)] = 0;
      for (int64_t c = 0; c < d; ++c) x.buf[static_cast<size_t>(x.shift + r * x.stride + c)] = static_cast<T>(NAN);
    }
  }
  const auto gamma = params<T>(d, 43, 1.0), beta = params<T>(d, 44, 0.0);
  std::vector<S> mean(static_cast<size_t>(d)), rstd(static_cast<size_t>(d));
  addnorm::BatchNormOptions opt;
  addnorm::batch_norm_forward<T>(y.view(), mean, rstd, {}, {}, x.cview(), mask, gamma, beta, opt);
  const auto f = addnorm::ref::batch_norm_forward<T>(x.cview(), mask, gamma, beta, opt.eps);
  EXPECT_TRUE(close(y, f.y, "batch_norm y"));
  EXPECT_TRUE(close_vec(mean, f.mean, 1.0, "batch_norm mean"));
  EXPECT_TRUE(close_vec(rstd, f.rstd, 1.0, "batch_norm rstd"));
  for (int64_t r = 1; masked && r < rows; r += 3)
    for (int64_t c = 0; c < d; ++c) {
      const double v = y.at(r, c);
      ASSERT_TRUE(v == 0.0 && !std::signbit(v)) << "padding row " << r << " col " << c << ": " << v;
    }
  // Backward from the saved statistics: the column sums, then dx (bn_backward_rows for 64 and 128).
  Mat<T> dy(rows, d, d + 5, 3, 45, 0.0, 1.0), dx(rows, d, d + 5, 3, 46, 0, 1);
  for (int64_t r = 1; masked && r < rows; r += 3)
    for (int64_t c = 0; c < d; ++c) dy.buf[static_cast<size_t>(dy.shift + r * dy.stride + c)] = static_cast<T>(NAN);
  std::vector<T> dgamma(static_cast<size_t>(d), T(0)), dbeta(static_cast<size_t>(d), T(0));
  addnorm::batch_norm_backward<T>(dx.view(), dgamma, dbeta, dy.cview(), x.cview(), mask, mean, rstd, gamma);
  const auto b = addnorm::ref::batch_norm_backward<T>(dy.cview(), x.cview(), mask, gamma, opt.eps);
  double term = 0;  // the size of dx's terms: rstd * |dy * gamma|, over the valid rows
  for (int64_t r = 0; r < rows; ++r) {
    if (masked && r % 3 == 1) continue;
    for (int64_t c = 0; c < d; ++c)
      term = std::max(term, f.rstd[static_cast<size_t>(c)] * std::abs(dy.at(r, c) * static_cast<double>(gamma[c])));
  }
  EXPECT_TRUE(close(dx, b.dx, "batch_norm dx", std::vector<double>(static_cast<size_t>(rows), 4 * term)));
  const double rs = std::sqrt(static_cast<double>(rows)) * 4;
  EXPECT_TRUE(close_vec(dgamma, b.dgamma, rs, "batch_norm dgamma"));
  EXPECT_TRUE(close_vec(dbeta, b.dbeta, rs, "batch_norm dbeta"));
  for (int64_t r = 1; masked && r < rows; r += 3)
    for (int64_t c = 0; c < d; ++c) {
      const double v = dx.at(r, c);
      ASSERT_TRUE(v == 0.0 && !std::signbit(v)) << "padding dx row " << r << " col " << c << ": " << v;
    }
}

TEST_P(Dispatch, BatchNormForwardAndBackward) {
  for (int64_t d : {16, 63, 64, 100, 128, 256})
    for (int64_t rows : {2, 17, 100})
      for (bool masked : {false, true}) {
        check_batch_norm<float>(rows, d, masked);
        check_batch_norm<bf16>(rows, d, masked);
        check_batch_norm<f16>(rows, d, masked);
      }
  check_batch_norm<bf16>(70000, 64, false);  // streamed
  check_batch_norm<float>(20000, 128, true);
  check_batch_norm<float>(600, 4100, false);  // streamed rows of the row kernels
  check_batch_norm<bf16>(1100, 4100, true);
}

INSTANTIATE_TEST_SUITE_P(SupportedTargets, Dispatch, ::testing::ValuesIn(addnorm::supported_simd_targets()),
                         [](const auto& p) { return p.param; });

TEST(DispatchApi, RejectsUnknownTarget) {
  EXPECT_THROW(addnorm::set_simd_target("sse9"), addnorm::Error);
  const auto targets = addnorm::supported_simd_targets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(targets.back(), "generic");
}

}  // namespace
