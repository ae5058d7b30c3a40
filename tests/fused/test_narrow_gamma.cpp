// RMSNorm forward of wide bf16 and f16 rows reads gamma in T, converted as it is loaded
// (RowOps::rms_forward_narrow and rms_forward_rows_narrow, from RowOps::rms_narrow_cols on:
// kNarrowGammaCols in src/simd/row_ops.hpp, 128 for bf16 on AVX2). The narrow kernels must give
// the same bits as the kernels that read gamma as an f32 array, on every SIMD target: one row (no
// next row, a next row walked forward and backward, streamed and not, on a line and 3 elements
// past one) and batches of rows, for widths with and without tails, with gamma holding a zero, a
// denormal, an Inf and a NaN. The public rms_norm_forward on wide rows is checked against the f64
// reference. This fails when the narrow path drops gamma (checked by passing null for it in
// rms_norm.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../../src/simd/row_ops.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "narrow_testing.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::bf16;
using addnorm::f16;
using addnorm::detail::NextRows;
using addnorm::testing::Placed;

using addnorm::testing::narrow_name;
using addnorm::testing::same_bytes;

// gamma of d elements in T and as f32, with a zero, a denormal of T, an Inf and a NaN.
template <class T>
struct Gamma {
  std::vector<T> t;
  std::vector<float> f;
  explicit Gamma(int64_t d) {
    addnorm::testing::Rng rng(static_cast<uint64_t>(d) + 11);
    t = addnorm::testing::random_vector<T>(d, rng, 1.0, 0.5);
    const auto at = [d](int64_t i) { return static_cast<size_t>(i % d); };
    t[at(1)] = T(0.0f);
    t[at(2)] = T(std::is_same_v<T, bf16> ? 1e-39f : 3e-6f);
    t[at(d - 1)] = T(std::numeric_limits<float>::infinity());
    t[at(d / 2)] = T(std::numeric_limits<float>::quiet_NaN());
    for (const T& v : t) f.push_back(static_cast<float>(v));
  }
};

template <class T>
void check_one_row(int64_t d, int64_t shift) {
  SCOPED_TRACE(std::string(narrow_name<T>()) + " d " + std::to_string(d) + " shift " + std::to_string(shift));
  const auto& ops = addnorm::detail::row_ops<T>();
  ASSERT_NE(ops.rms_forward_narrow, nullptr);
  const Gamma<T> g(d);
  Placed<float> gf(g.f, shift);
  Placed<T> gt(g.t, shift);
  addnorm::testing::Rng rng(static_cast<uint64_t>(d * 3 + shift));
  Placed<T> x(addnorm::testing::random_vector<T>(d, rng, 0.5, 2.0), shift), y1(d, shift), y2(d, shift);
  addnorm::testing::for_each_walk<T>(d, [&](const NextRows* next, bool stream) {
    const double a = ops.rms_forward(y1.data(), x.data(), gf.data(), d, 1e-5, stream, next);
    const double b = ops.rms_forward_narrow(y2.data(), x.data(), gt.data(), d, 1e-5, stream, next);
    EXPECT_TRUE(same_bytes(y1, y2, static_cast<size_t>(d)));
    EXPECT_EQ(a, b);
  });
}

template <class T>
void check_batch(int64_t count, int64_t d, bool stream) {
  SCOPED_TRACE(std::string(narrow_name<T>()) + " count " + std::to_string(count) + " d " + std::to_string(d) +
               (stream ? ", streamed" : ""));
  const auto& ops = addnorm::detail::row_ops<T>();
  ASSERT_NE(ops.rms_forward_rows_narrow, nullptr);
  const Gamma<T> g(d);
  const int64_t stride = d + 3;  // rows off their lines
  addnorm::testing::Rng rng(static_cast<uint64_t>(count * 100 + d));
  // (count + 16) rows: a batch prefetches the rows after it (`ahead`).
  const auto x = addnorm::testing::random_vector<T>((count + 16) * stride, rng, -1.0, 3.0);
  std::vector<T> y1(x.size()), y2(x.size());
  double s1[40], s2[40];
  ops.rms_forward_rows(y1.data(), stride, x.data(), stride, g.f.data(), count, d, 1e-5, stream, count, s1);
  ops.rms_forward_rows_narrow(y2.data(), stride, x.data(), stride, g.t.data(), count, d, 1e-5, stream, count, s2);
  EXPECT_TRUE(same_bytes(y1, y2, y1.size()));
  for (int64_t r = 0; r < count; ++r) EXPECT_EQ(s1[r], s2[r]) << "row " << r;
}

TEST(NarrowGamma, OneRowGivesTheSameBitsAsAnF32Array) {
  addnorm::testing::for_each_simd_target([] {
    for (int64_t d : {16, 100, 6144, 6150, 8192})
      for (int64_t shift : {0, 3}) {
        check_one_row<bf16>(d, shift);
        check_one_row<f16>(d, shift);
      }
  });
}

TEST(NarrowGamma, BatchesGiveTheSameBitsAsAnF32Array) {
  addnorm::testing::for_each_simd_target([] {
    for (int64_t count : {1, 5, 16, 17, 40})
      for (int64_t d : {16, 100, 1000, 6150})
        for (bool stream : {false, true}) {
          check_batch<bf16>(count, d, stream);
          check_batch<f16>(count, d, stream);
        }
  });
}

// The public RMSNorm forward on rows of d (wide: the narrow path), streamed and not, against the
// f64 reference, with gamma far from 1 so that a lost gamma shows.
template <class T>
void check_wide_rows(int64_t d) {
  for (int64_t rows : {3, 40, 700}) {  // 700 rows of 6200 2-byte elements: over 8 MiB, streamed
    SCOPED_TRACE(std::string(narrow_name<T>()) + " rows " + std::to_string(rows) + " d " + std::to_string(d));
    addnorm::testing::Rng rng(static_cast<uint64_t>(rows));
    const auto x = addnorm::testing::random_vector<T>(rows * d, rng, 2.0, 3.0);
    const auto gamma = addnorm::testing::random_vector<T>(d, rng, 3.0, 1.0);
    std::vector<T> y(x.size());
    std::vector<float> rstd(static_cast<size_t>(rows));
    addnorm::rms_norm_forward<T>(addnorm::View2D<T>(y.data(), rows, d), rstd,
                                 addnorm::View2D<const T>(x.data(), rows, d), gamma, 1e-5);
    const auto ref = addnorm::ref::rms_norm_forward<T>(addnorm::View2D<const T>(x.data(), rows, d), gamma, 1e-5);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_LE(std::abs(static_cast<double>(y[i]) - ref.y[i]), 8e-3 * std::max(1.0, std::abs(ref.y[i])))
          << "element " << i;
    for (size_t r = 0; r < rstd.size(); ++r)
      ASSERT_NEAR(rstd[r], ref.rstd[r], 1e-5 * std::abs(ref.rstd[r])) << "row " << r;
  }
}

TEST(NarrowGamma, WideRowsMatchTheReference) {
  addnorm::testing::for_each_simd_target([] {
    check_wide_rows<bf16>(6200);
    check_wide_rows<bf16>(200);  // the narrow form on AVX2 (rms_narrow_cols)
    check_wide_rows<f16>(8200);
  });
}

}  // namespace
