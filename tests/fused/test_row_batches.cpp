// The batch row kernels on every SIMD target: ln_backward_rows (short rows 16 at a time) against
// the same rows one at a time and against ln_backward_pair over consecutive pairs; for RMSNorm
// (mean null) against rms_backward row by row. ln_forward_rows (batches of up to 16 rows in vector
// lanes; more go row by row) against ln_forward row by row. add_norm_backward_rows (the fused
// backward's batches) against the same rows one at a time and against add_norm_backward_row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../../src/simd/row_ops.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::bf16;
using addnorm::testing::same_bits;

// count rows of d (row stride d + 3) through ln_backward_rows, against
//   - each row alone (a batch of one) called in row order: the same bits for dx and for the
//     partials (rows are independent lanes; the partials take the rows' terms in row order);
//   - ln_backward_pair over consecutive pairs of the same rows: dx within a few roundings (the two
//     kernels are separately compiled, and may contract a multiply-add differently).
// gamma and the partials present or not.
template <class T>
void check_rows(int64_t count, int64_t d, bool with_gamma, bool with_partials, bool rms = false) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE("target " + addnorm::simd_target() + " " + (sizeof(T) == 4 ? "f32" : "bf16") + " count " +
               std::to_string(count) + " d " + std::to_string(d) + (with_gamma ? " gamma" : "") +
               (with_partials ? " partials" : "") + (rms ? " rms" : ""));
  const int64_t stride = d + 3, n = count * stride;
  addnorm::testing::Rng rng(static_cast<uint64_t>(count * 1000 + d));
  using addnorm::testing::random_vector;
  const auto x = random_vector<T>(n, rng, 0.7, 1.3), dy = random_vector<T>(n, rng, 0, 1);
  const auto gamma = random_vector<T>(d, rng, 1, 0.2);
  const auto mean = random_vector<S>(count, rng, 0.7, 0.1);
  const auto rstd = random_vector<S>(count, rng, 0.8, 0.1);
  const auto start = random_vector<S>(2 * d, rng, 0, 3);  // partials: dgamma | dbeta
  std::vector<T> dx1(static_cast<size_t>(n), T(0)), dx2(static_cast<size_t>(n), T(0)),
      dx3(static_cast<size_t>(n), T(0));
  std::vector<S> p1 = start, p2 = start, p3 = start;
  const T* g = with_gamma ? gamma.data() : nullptr;
  const auto& ops = addnorm::detail::row_ops<T>();
  ASSERT_NE(ops.ln_backward_rows, nullptr);
  const auto dg = [&](std::vector<S>& p) { return with_partials ? p.data() : nullptr; };
  const auto db = [&](std::vector<S>& p) { return with_partials && !rms ? p.data() + d : nullptr; };
  const S* m = rms ? nullptr : mean.data();
  ops.ln_backward_rows(dx1.data(), stride, dg(p1), db(p1), dy.data(), stride, x.data(), stride, m, rstd.data(), g,
                       count, d, false, 0);
  for (int64_t r = 0; r < count; ++r) {
    const int64_t o = r * stride;
    ops.ln_backward_rows(dx2.data() + o, stride, dg(p2), db(p2), dy.data() + o, stride, x.data() + o, stride,
                         rms ? nullptr : m + r, rstd.data() + r, g, 1, d, false, 0);
  }
  // RMSNorm: the one-row kernel, row by row, in place of the pairs.
  for (int64_t r = 0; rms && r < count; ++r) {
    const int64_t o = r * stride;
    ops.rms_backward(dx3.data() + o, dg(p3), dy.data() + o, x.data() + o, rstd[r], g, d, false, nullptr);
  }
  for (int64_t k = 0; !rms && k + 1 < count; k += 2) {
    const int64_t o = k * stride;
    ops.ln_backward_pair(dx3.data() + o, dx3.data() + o + stride, dg(p3), db(p3), dy.data() + o, dy.data() + o + stride,
                         x.data() + o, x.data() + o + stride, mean[k], mean[k + 1], rstd[k], rstd[k + 1], g, d, false,
                         nullptr, nullptr);
  }
  const double tol = sizeof(T) == 4 ? 1e-6 : 1e-2;
  for (int64_t r = 0; r < count; ++r)
    for (int64_t c = 0; c < stride; ++c) {
      const auto i = static_cast<size_t>(r * stride + c);
      ASSERT_TRUE(same_bits(dx1[i], dx2[i])) << "dx(" << r << ", " << c << "): " << static_cast<double>(dx1[i])
                                             << " in the batch, " << static_cast<double>(dx2[i]) << " alone";
      if (c >= d) {  // the padding between rows untouched
        ASSERT_EQ(static_cast<double>(dx1[i]), 0.0) << "wrote past row " << r;
      } else if (rms || r < count - count % 2) {
        const double a = static_cast<double>(dx1[i]), b = static_cast<double>(dx3[i]);
        ASSERT_LE(std::fabs(a - b), tol * std::max(1.0, std::fabs(b)))
            << "dx(" << r << ", " << c << ") vs " << (rms ? "rms_backward" : "pairs");
      }
    }
  for (size_t i = 0; i < p1.size(); ++i) {
    ASSERT_TRUE(same_bits(p1[i], p2[i])) << "partial " << i;
    if (!with_partials) {
      ASSERT_TRUE(same_bits(p1[i], start[i])) << "partial " << i << " written without partials";
    } else if (rms || count % 2 == 0) {
      const double a = static_cast<double>(p1[i]), b = static_cast<double>(p3[i]);
      ASSERT_LE(std::fabs(a - b), 1e-5 * std::max(1.0, std::fabs(b))) << "partial " << i << " vs pairs";
    }
  }
}

// count rows of d (row stride d + 5) through one ln_forward_rows call, against ln_forward row by
// row: the same bits for y and the statistics. Rows 2, 5, 20 and 37 start far from the rest: with
// d of 100 or more their shift (the mean of the first 16) is too far off and the row is done on its
// own (with 64 or fewer elements it never is: those 16 alone give the row a variance of at least a
// quarter of the shift's square). Rows 9 and 33 hold an Inf and rows 13 and 47 a value whose square
// overflows f32 (done on their own too). The padding between rows stays untouched.
template <class T>
void check_forward_rows(int64_t count, int64_t d, bool with_gamma, bool with_beta) {
  using C = addnorm::compute_t<T>;
  SCOPED_TRACE("target " + addnorm::simd_target() + " " + (sizeof(T) == 4 ? "f32" : "bf16") + " count " +
               std::to_string(count) + " d " + std::to_string(d) + (with_gamma ? " gamma" : "") +
               (with_beta ? " beta" : ""));
  const int64_t stride = d + 5, n = count * stride;
  addnorm::testing::Rng rng(static_cast<uint64_t>(count * 1000 + d));
  using addnorm::testing::random_vector;
  auto x = random_vector<T>(n, rng, 0.3, 1.7);
  const auto set = [&](int64_t r, int64_t c, double v) {
    if (r < count) x[static_cast<size_t>(r * stride + c)] = static_cast<T>(v);
  };
  for (int64_t r : {2, 5, 20, 37})
    for (int64_t c = 0; c < 16; ++c) set(r, c, 400.0 + static_cast<double>(c));
  for (int64_t r : {9, 33}) set(r, d / 2, INFINITY);
  for (int64_t r : {13, 47}) set(r, d - 1, sizeof(T) == 4 ? 3e19 : 1e30);
  const auto gamma = random_vector<C>(d, rng, 1, 0.2), beta = random_vector<C>(d, rng, 0, 0.5);
  const C* g = with_gamma ? gamma.data() : nullptr;
  const C* b = with_beta ? beta.data() : nullptr;
  std::vector<T> y1(static_cast<size_t>(n), T(0)), y2(static_cast<size_t>(n), T(0));
  std::vector<addnorm::detail::RowMeanRstd> st1(static_cast<size_t>(count)), st2(static_cast<size_t>(count));
  const auto& ops = addnorm::detail::row_ops<T>();
  ASSERT_NE(ops.ln_forward_rows, nullptr);
  ops.ln_forward_rows(y1.data(), stride, x.data(), stride, g, b, count, d, 1e-5, false, 0, st1.data());
  for (int64_t r = 0; r < count; ++r)
    st2[static_cast<size_t>(r)] =
        ops.ln_forward(y2.data() + r * stride, x.data() + r * stride, g, b, d, 1e-5, false, nullptr);
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<size_t>(i);
    ASSERT_TRUE(same_bits(y1[k], y2[k])) << "y(" << i / stride << ", " << i % stride
                                         << "): " << static_cast<double>(y1[k]) << " in the batch, "
                                         << static_cast<double>(y2[k]) << " alone";
    if (i % stride >= d) {
      ASSERT_EQ(static_cast<double>(y1[k]), 0.0) << "wrote past row " << i / stride;
    }
  }
  for (int64_t r = 0; r < count; ++r) {
    const auto k = static_cast<size_t>(r);
    ASSERT_TRUE(same_bits(st1[k].mean, st2[k].mean)) << "mean of row " << r;
    ASSERT_TRUE(same_bits(st1[k].rstd, st2[k].rstd)) << "rstd of row " << r;
  }
}

TEST(RowBatches, LayerNormForwardRowsMatchTheOneRowKernel) {
  addnorm::testing::for_each_simd_target([] {
    // 64 and 128: compiled for their width. More than 16 rows go row by row.
    for (int64_t d : {64, 128})
      for (int64_t count : {1, 7, 16, 17, 48, 50})
        for (bool gamma : {false, true})
          for (bool beta : {false, true}) {
            check_forward_rows<float>(count, d, gamma, beta);
            check_forward_rows<bf16>(count, d, gamma, beta);
          }
    for (int64_t d : {16, 100, 700})
      for (int64_t count : {3, 16, 20}) {
        check_forward_rows<float>(count, d, true, true);
        check_forward_rows<bf16>(count, d, true, false);
      }
  });
}

// count rows of d (row stride d + 3) through add_norm_backward_rows (LayerNorm, or RMSNorm with mean
// null), with or without ds, dropout factors (keep), gamma and the partials, against
//   - each row alone (a batch of one): the same bits for dh, df and the partials;
//   - add_norm_backward_row row by row: within a few roundings (its sums pass keeps other
//     accumulators), and dh = alpha * t, df = keep * t for the same t (alpha 1.5, and 1: without
//     dropout dh and df are then one value).
// R: the residual stream's type (x, ds, dh): T, or f32 for bf16 data (add_norm_backward_rows_f32).
template <class T, class R = T>
void check_fused_backward_rows(int64_t count, int64_t d, bool layer, bool with_ds, bool with_keep, bool with_gamma,
                               bool with_partials, double alpha_in) {
  using S = addnorm::stat_t<T>;
  using C = addnorm::compute_t<T>;
  SCOPED_TRACE("target " + addnorm::simd_target() + " " + (sizeof(T) == 4 ? "f32" : "bf16") +
               (sizeof(R) != sizeof(T) ? " with f32 stream" : "") + " count " + std::to_string(count) + " d " +
               std::to_string(d) + (layer ? " layer" : " rms") + (with_ds ? " ds" : "") + (with_keep ? " keep" : "") +
               (with_gamma ? " gamma" : "") + (with_partials ? " partials" : "") + " alpha " +
               std::to_string(alpha_in));
  const int64_t stride = d + 3, n = count * stride;
  addnorm::testing::Rng rng(static_cast<uint64_t>(count * 1000 + d));
  using addnorm::testing::random_vector;
  const auto x = random_vector<R>(n, rng, 0.7, 1.3);
  const auto dy = random_vector<T>(n, rng, 0, 1);
  const auto ds = random_vector<R>(n, rng, 0, 1);
  std::vector<C> keep(static_cast<size_t>(count * d));
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = i % 7 == 3 ? C{0} : C{1.25};
  const auto gamma = random_vector<T>(d, rng, 1, 0.2);
  const std::vector<T> ones(static_cast<size_t>(d), T(1));
  const auto mean = random_vector<S>(count, rng, 0.7, 0.1);
  const auto rstd = random_vector<S>(count, rng, 0.8, 0.1);
  const auto start = random_vector<S>(2 * d, rng, 0, 3);  // partials: dgamma | dbeta
  std::vector<R> dh1(static_cast<size_t>(n), R(0)), dh2 = dh1, dh3 = dh1;
  std::vector<T> df1(static_cast<size_t>(n), T(0)), df2 = df1, df3 = df1;
  std::vector<S> p1 = start, p2 = start, p3 = start;
  const T* g = with_gamma ? gamma.data() : nullptr;
  const T* g_dx = with_gamma ? gamma.data() : ones.data();
  const C alpha = static_cast<C>(alpha_in);
  const auto& ops = addnorm::detail::row_ops<T>();
  const auto rows_op = [&] {
    if constexpr (std::is_same_v<T, R>)
      return ops.add_norm_backward_rows;
    else
      return ops.add_norm_backward_rows_f32;
  }();
  const auto row_op = [&] {
    if constexpr (std::is_same_v<T, R>)
      return ops.add_norm_backward_row;
    else
      return ops.add_norm_backward_row_f32;
  }();
  ASSERT_NE(rows_op, nullptr);
  const auto dg = [&](std::vector<S>& p) { return with_partials ? p.data() : nullptr; };
  const auto db = [&](std::vector<S>& p) { return with_partials && layer ? p.data() + d : nullptr; };
  const R* dsp = with_ds ? ds.data() : nullptr;
  const C* kp = with_keep ? keep.data() : nullptr;
  rows_op(dh1.data(), stride, df1.data(), stride, dg(p1), db(p1), dy.data(), stride, x.data(), stride, dsp, stride, kp,
          layer ? mean.data() : nullptr, rstd.data(), g, g_dx, alpha, count, d, false, false, 0);
  for (int64_t r = 0; r < count; ++r) {
    const int64_t o = r * stride;
    rows_op(dh2.data() + o, stride, df2.data() + o, stride, dg(p2), db(p2), dy.data() + o, stride, x.data() + o, stride,
            with_ds ? dsp + o : nullptr, stride, with_keep ? kp + r * d : nullptr, layer ? mean.data() + r : nullptr,
            rstd.data() + r, g, g_dx, alpha, 1, d, false, false, 0);
    row_op(dh3.data() + o, df3.data() + o, dg(p3), db(p3), dy.data() + o, x.data() + o, with_ds ? dsp + o : nullptr,
           with_keep ? kp + r * d : nullptr, mean[r], rstd[r], g, g_dx, alpha, d, layer, false, false, nullptr);
  }
  const double tol = sizeof(T) == 4 ? 1e-6 : 1e-2;
  for (int64_t r = 0; r < count; ++r)
    for (int64_t c = 0; c < stride; ++c) {
      const auto i = static_cast<size_t>(r * stride + c);
      ASSERT_TRUE(same_bits(dh1[i], dh2[i])) << "dh(" << r << ", " << c << "): " << static_cast<double>(dh1[i])
                                             << " in the batch, " << static_cast<double>(dh2[i]) << " alone";
      ASSERT_TRUE(same_bits(df1[i], df2[i])) << "df(" << r << ", " << c << ")";
      if (c >= d) {  // the padding between rows untouched
        ASSERT_EQ(static_cast<double>(dh1[i]), 0.0) << "wrote dh past row " << r;
        ASSERT_EQ(static_cast<double>(df1[i]), 0.0) << "wrote df past row " << r;
        continue;
      }
      const double h1 = static_cast<double>(dh1[i]), h3 = static_cast<double>(dh3[i]);
      ASSERT_LE(std::fabs(h1 - h3), 2 * tol * std::max(1.0, std::fabs(h3))) << "dh(" << r << ", " << c << ") vs row";
      // df = keep * t with t = dh / alpha (both from the same t, rounded once each).
      const double k = with_keep ? static_cast<double>(keep[static_cast<size_t>(r * d + c)]) : 1.0;
      const double want = k * h1 / alpha_in;
      ASSERT_LE(std::fabs(static_cast<double>(df1[i]) - want), 2 * tol * std::max(1.0, std::fabs(want)))
          << "df(" << r << ", " << c << ") vs keep * dh / alpha";
    }
  for (size_t i = 0; i < p1.size(); ++i) {
    ASSERT_TRUE(same_bits(p1[i], p2[i])) << "partial " << i;
    const double a = static_cast<double>(p1[i]), b = static_cast<double>(p3[i]);
    ASSERT_LE(std::fabs(a - b), 1e-5 * std::max(1.0, std::fabs(b))) << "partial " << i << " vs row";
    if (!with_partials || (!layer && i >= static_cast<size_t>(d))) {
      ASSERT_TRUE(same_bits(p1[i], start[i])) << "partial " << i << " written when not asked for";
    }
  }
}

TEST(RowBatches, FusedBackwardRowsMatchTheOneRowKernel) {
  addnorm::testing::for_each_simd_target([] {
    for (int64_t d : {16, 17, 64, 100, 128, 255})
      for (int64_t count : {1, 5, 16})
        for (bool layer : {true, false})
          for (int flags = 0; flags < 8; ++flags) {
            const bool ds = (flags & 1) != 0, keep = (flags & 2) != 0, gamma = (flags & 4) != 0;
            // (alpha 1 without dropout: dh and df are computed once, the same values)
            for (double alpha : {1.5, 1.0}) {
              check_fused_backward_rows<float>(count, d, layer, ds, keep, gamma, true, alpha);
              check_fused_backward_rows<bf16>(count, d, layer, ds, keep, gamma, gamma, alpha);
              check_fused_backward_rows<bf16, float>(count, d, layer, ds, keep, gamma, true, alpha);
            }
          }
  });
}

TEST(RowBatches, NormBackwardRowsMatchTheOneAndTwoRowKernels) {
  addnorm::testing::for_each_simd_target([] {
    for (int64_t d : {16, 17, 64, 100, 128, 200, 255})
      for (int64_t count : {1, 2, 5, 8, 14, 16})
        for (bool gamma : {false, true})
          for (bool partials : {false, true}) {
            check_rows<float>(count, d, gamma, partials);
            check_rows<bf16>(count, d, gamma, partials);
            check_rows<float>(count, d, gamma, partials, true);
            check_rows<bf16>(count, d, gamma, partials, true);
          }
    for (int64_t count : {2, 16}) check_rows<bf16>(count, 500, true, true);
  });
}

}  // namespace
