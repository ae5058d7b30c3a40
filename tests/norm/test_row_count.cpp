// A row's outputs do not depend on how many rows come with it: the forward kernels choose their path
// by the number of rows (one row is no batch; fewer than kPlacedRows read bf16/f16 gamma and beta as
// they are instead of converted once per call: src/norm/workspace.hpp), and every path must give the
// bits the many-row path gives. A decoder's one-token step then normalizes its row exactly as the
// prompt's pass did. LayerNorm, RMSNorm and the fused pre-norm forward, every element type, every
// SIMD target this CPU supports, widths under a vector and on both sides of each threshold
// (ln_plain_cols 1024, rms_narrow_cols 128, kNarrowAffineCols 4096 / 5120).
#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "../../src/norm/workspace.hpp"
#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::bf16;
using addnorm::f16;
using addnorm::View2D;

constexpr int64_t kRows = 24;  // the many-row call: batches of rows, parameters converted once
constexpr int64_t kWidths[] = {1, 3, 8, 16, 64, 100, 128, 512, 768, 1024, 1100, 4096, 5200};

template <class T>
::testing::AssertionResult same_rows(const char* what, const std::vector<T>& all, const std::vector<T>& few,
                                     int64_t first, int64_t n, int64_t d) {
  const size_t at = static_cast<size_t>(first * d);
  for (size_t i = 0; i < static_cast<size_t>(n * d); ++i)
    if (std::memcmp(&all[at + i], &few[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure()
             << what << ": row " << first + static_cast<int64_t>(i) / d << ", column " << static_cast<int64_t>(i) % d
             << " differs from the " << kRows << "-row call";
  return ::testing::AssertionSuccess();
}

// Each of the calls: rows [first, first + n) alone, for n = 1, 2, 3 (first = 5: off row 0's
// alignment), against the same rows of one call over all kRows rows.
template <class F>
void for_few_rows(int64_t d, const F& check) {
  for (int64_t n = 1; n < addnorm::detail::kPlacedRows; ++n) {
    SCOPED_TRACE("rows " + std::to_string(n) + " of " + std::to_string(d));
    check(int64_t{5}, n);
  }
}

template <class T>
void check_layer_norm(int64_t d) {
  using S = addnorm::stat_t<T>;
  addnorm::testing::Rng rng(static_cast<uint64_t>(d));
  const auto x = addnorm::testing::random_vector<T>(kRows * d, rng, 0.5, 2);
  const auto gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  const auto beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.3);
  std::vector<T> y(x.size());
  std::vector<S> mean(kRows), rstd(kRows);
  addnorm::layer_norm_forward<T>(View2D<T>(y.data(), kRows, d), mean, rstd, View2D<const T>(x.data(), kRows, d), gamma,
                                 beta, 1e-5);
  for_few_rows(d, [&](int64_t first, int64_t n) {
    std::vector<T> y1(static_cast<size_t>(n * d));
    std::vector<S> m1(static_cast<size_t>(n)), r1(static_cast<size_t>(n));
    addnorm::layer_norm_forward<T>(View2D<T>(y1.data(), n, d), m1, r1, View2D<const T>(x.data() + first * d, n, d),
                                   gamma, beta, 1e-5);
    EXPECT_TRUE(same_rows("layer_norm_forward y", y, y1, first, n, d));
    EXPECT_TRUE(same_rows("layer_norm_forward mean", mean, m1, first, n, 1));
    EXPECT_TRUE(same_rows("layer_norm_forward rstd", rstd, r1, first, n, 1));
  });
}

template <class T>
void check_rms_norm(int64_t d) {
  using S = addnorm::stat_t<T>;
  addnorm::testing::Rng rng(static_cast<uint64_t>(d) + 1);
  const auto x = addnorm::testing::random_vector<T>(kRows * d, rng, 0.5, 2);
  const auto gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  std::vector<T> y(x.size());
  std::vector<S> rstd(kRows);
  addnorm::rms_norm_forward<T>(View2D<T>(y.data(), kRows, d), rstd, View2D<const T>(x.data(), kRows, d), gamma, 1e-5);
  for_few_rows(d, [&](int64_t first, int64_t n) {
    std::vector<T> y1(static_cast<size_t>(n * d));
    std::vector<S> r1(static_cast<size_t>(n));
    addnorm::rms_norm_forward<T>(View2D<T>(y1.data(), n, d), r1, View2D<const T>(x.data() + first * d, n, d), gamma,
                                 1e-5);
    EXPECT_TRUE(same_rows("rms_norm_forward y", y, y1, first, n, d));
    EXPECT_TRUE(same_rows("rms_norm_forward rstd", rstd, r1, first, n, 1));
  });
}

// The fused pre-norm forward, s = h + f and y = Norm(s), residual stream in T or (R = float) in f32.
template <class T, class R>
void check_add_norm(int64_t d, addnorm::NormKind kind) {
  using S = addnorm::stat_t<T>;
  const bool layer = kind == addnorm::NormKind::layer;
  addnorm::testing::Rng rng(static_cast<uint64_t>(d) + 2);
  const auto h = addnorm::testing::random_vector<R>(kRows * d, rng, 0.5, 2);
  const auto f = addnorm::testing::random_vector<T>(kRows * d, rng, 0, 1);
  const auto gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  const auto beta = layer ? addnorm::testing::random_vector<T>(d, rng, 0, 0.3) : std::vector<T>{};
  addnorm::AddNormOptions options;
  options.kind = kind;
  std::vector<R> s(h.size());
  std::vector<T> y(h.size());
  std::vector<S> mean(layer ? kRows : 0), rstd(kRows);
  addnorm::add_norm_forward<T, R>(View2D<R>(s.data(), kRows, d), View2D<T>(y.data(), kRows, d), mean, rstd,
                                  View2D<const R>(h.data(), kRows, d), View2D<const T>(f.data(), kRows, d), gamma, beta,
                                  options);
  for_few_rows(d, [&](int64_t first, int64_t n) {
    std::vector<R> s1(static_cast<size_t>(n * d));
    std::vector<T> y1(static_cast<size_t>(n * d));
    std::vector<S> m1(layer ? static_cast<size_t>(n) : 0), r1(static_cast<size_t>(n));
    addnorm::add_norm_forward<T, R>(View2D<R>(s1.data(), n, d), View2D<T>(y1.data(), n, d), m1, r1,
                                    View2D<const R>(h.data() + first * d, n, d),
                                    View2D<const T>(f.data() + first * d, n, d), gamma, beta, options);
    EXPECT_TRUE(same_rows("add_norm_forward s", s, s1, first, n, d));
    EXPECT_TRUE(same_rows("add_norm_forward y", y, y1, first, n, d));
    if (layer) {
      EXPECT_TRUE(same_rows("add_norm_forward mean", mean, m1, first, n, 1));
    }
    EXPECT_TRUE(same_rows("add_norm_forward rstd", rstd, r1, first, n, 1));
  });
}

template <class T>
void check_all() {
  addnorm::testing::for_each_simd_target([] {
    for (const int64_t d : kWidths) {
      check_layer_norm<T>(d);
      check_rms_norm<T>(d);
      for (const auto kind : {addnorm::NormKind::layer, addnorm::NormKind::rms}) {
        check_add_norm<T, T>(d, kind);
        if constexpr (!std::is_same_v<T, double>) check_add_norm<T, float>(d, kind);
      }
    }
  });
}

TEST(RowCount, Bf16RowsGiveTheSameBitsAloneAsInABatch) { check_all<bf16>(); }
TEST(RowCount, F16RowsGiveTheSameBitsAloneAsInABatch) { check_all<f16>(); }
TEST(RowCount, F32RowsGiveTheSameBitsAloneAsInABatch) { check_all<float>(); }
TEST(RowCount, F64RowsGiveTheSameBitsAloneAsInABatch) { check_all<double>(); }

}  // namespace
