// LayerNorm forward and the fused LayerNorm forward of wide bf16 and f16 rows read gamma and beta in
// their narrow form (narrow_affine_t in src/simd/row_ops.hpp): for bf16 packed in one array
// (Bf16Affine: gamma's bf16 bits in the high half of each 32-bit element, beta's in the low), for
// f16 as two f16 arrays. The narrow kernels must give the same bits as the kernels that read gamma
// and beta as two f32 arrays, on every SIMD target: one row (no next row, a next row walked forward
// and backward, streamed and not, on a line and 3 elements past one), the fused pre-norm forward
// of one row (residual stream in T or f32, with and without dropout) and batches of rows, for
// widths with and without tails, with gamma and beta holding zeros, denormals, an Inf and a NaN.
// This fails when gamma and beta are swapped or a half is taken from the wrong bits (checked by
// making affine_parts return beta as gamma). The AVX2 target's plain form (two bf16 arrays, read by
// parity) is checked the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../../src/norm/workspace.hpp"
#include "../../src/simd/row_ops.hpp"
#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "narrow_testing.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::bf16;
using addnorm::f16;
using addnorm::detail::Bf16Affine;
using addnorm::detail::narrow_affine_t;
using addnorm::detail::NextRows;
using addnorm::detail::RowMeanRstd;
using addnorm::testing::Placed;

using addnorm::testing::narrow_name;
using addnorm::testing::same_bytes;

// gamma and beta of d elements with some special values: a zero gamma, a denormal beta, an Inf
// beta (its outputs Inf) and a NaN gamma; as T, as f32 (gc, bc) and in their narrow form (gn, bn;
// bn empty for bf16, whose narrow form is one packed array).
template <class T>
struct Params {
  using N = narrow_affine_t<T>;
  std::vector<T> gamma, beta;
  std::vector<float> gc, bc;
  std::vector<N> gn, bn;
  explicit Params(int64_t d) {
    addnorm::testing::Rng rng(static_cast<uint64_t>(d) + 7);
    gamma = addnorm::testing::random_vector<T>(d, rng, 1.0, 0.5);
    beta = addnorm::testing::random_vector<T>(d, rng, 0.0, 1.0);
    const auto at = [d](int64_t i) { return static_cast<size_t>(i % d); };
    gamma[at(1)] = T(0.0f);
    beta[at(2)] = T(std::is_same_v<T, bf16> ? 1e-39f : 3e-6f);  // a denormal of T
    beta[at(d - 1)] = T(std::numeric_limits<float>::infinity());
    gamma[at(d / 2)] = T(std::numeric_limits<float>::quiet_NaN());
    for (size_t i = 0; i < gamma.size(); ++i) {
      gc.push_back(static_cast<float>(gamma[i]));
      bc.push_back(static_cast<float>(beta[i]));
      if constexpr (std::is_same_v<T, bf16>) {
        gn.push_back({static_cast<uint32_t>(gamma[i].bits) << 16 | beta[i].bits});
      } else {
        gn.push_back(gamma[i]);
        bn.push_back(beta[i]);
      }
    }
  }
};

// The narrow gamma and beta of p placed `shift` elements past a line; b() is null for bf16.
template <class T>
struct PlacedNarrow {
  Placed<narrow_affine_t<T>> gs, bs;
  PlacedNarrow(const Params<T>& p, int64_t shift) : gs(p.gn, shift), bs(p.bn.empty() ? p.gn : p.bn, shift) {}
  const narrow_affine_t<T>* g() { return gs.data(); }
  const narrow_affine_t<T>* b() { return std::is_same_v<T, bf16> ? nullptr : bs.data(); }
};

// The kernels check_one_row and check_batch compare with those reading two f32 arrays: gamma and
// beta in their narrow form (every target), or as two arrays of T (RowOps::ln_forward_plain and
// ln_forward_rows_plain: bf16 on AVX2, whose passes read them by parity, map2 in vec_map.inc).
enum class Form { kNarrow, kPlain };

template <class T>
void check_one_row(int64_t d, int64_t shift, Form form = Form::kNarrow) {
  SCOPED_TRACE(std::string(narrow_name<T>()) + (form == Form::kPlain ? " plain" : "") + " d " + std::to_string(d) +
               " shift " + std::to_string(shift));
  const auto& ops = addnorm::detail::row_ops<T>();
  ASSERT_TRUE(form == Form::kPlain ? ops.ln_forward_plain != nullptr : ops.ln_forward_narrow != nullptr);
  const Params<T> p(d);
  Placed<float> gc(p.gc, shift), bc(p.bc, shift);
  PlacedNarrow<T> n(p, shift);
  Placed<T> gt(p.gamma, shift), bt(p.beta, shift);
  addnorm::testing::Rng rng(static_cast<uint64_t>(d * 3 + shift));
  Placed<T> x(addnorm::testing::random_vector<T>(d, rng, 0.5, 2.0), shift), y1(d, shift), y2(d, shift);
  addnorm::testing::for_each_walk<T>(d, [&](const NextRows* next, bool stream) {
    const RowMeanRstd a = ops.ln_forward(y1.data(), x.data(), gc.data(), bc.data(), d, 1e-5, stream, next);
    const RowMeanRstd b = form == Form::kPlain
                              ? ops.ln_forward_plain(y2.data(), x.data(), gt.data(), bt.data(), d, 1e-5, stream, next)
                              : ops.ln_forward_narrow(y2.data(), x.data(), n.g(), n.b(), d, 1e-5, stream, next);
    EXPECT_TRUE(same_bytes(y1, y2, static_cast<size_t>(d)));
    EXPECT_EQ(a.mean, b.mean);
    EXPECT_EQ(a.rstd, b.rstd);
  });
}

// The fused pre-norm forward of one row (s = alpha * h + keep * f, y = LayerNorm(s)), residual
// stream in T (R = T) or f32 (R = float), with and without dropout's keep.
template <class T, class R>
void check_fused_row(int64_t d, int64_t shift) {
  SCOPED_TRACE(std::string(narrow_name<T>()) + (sizeof(R) == 2 ? " residual" : ", f32 residual") + ", d " +
               std::to_string(d) + " shift " + std::to_string(shift));
  const auto& ops = addnorm::detail::row_ops<T>();
  ASSERT_NE(ops.add_layer_norm_forward_row_narrow, nullptr);
  ASSERT_NE(ops.add_layer_norm_forward_row_narrow_f32, nullptr);
  const Params<T> p(d);
  Placed<float> gc(p.gc, shift), bc(p.bc, shift);
  PlacedNarrow<T> n(p, shift);
  addnorm::testing::Rng rng(static_cast<uint64_t>(d * 5 + shift));
  using addnorm::testing::random_vector;
  Placed<R> h(random_vector<R>(d, rng, 0.5, 2.0), shift), s1(d, shift), s2(d, shift), t(d, shift);
  Placed<T> f(random_vector<T>(d, rng), shift), y1(d, shift), y2(d, shift);
  Placed<float> keep(random_vector<float>(d, rng, 1.0, 0.2), shift);
  const std::vector<T> n0(static_cast<size_t>(d));
  const NextRows forward = NextRows::of(n0.data(), n0.data()).then(true, 0, 0);
  for (const float* k : {static_cast<const float*>(nullptr), static_cast<const float*>(keep.data())})
    for (bool stream : {false, true}) {
      SCOPED_TRACE(std::string(k == nullptr ? "no dropout" : "dropout") + (stream ? ", streamed" : ""));
      RowMeanRstd a, b;
      if constexpr (std::is_same_v<R, T>) {
        a = ops.add_norm_forward_row(s1.data(), y1.data(), h.data(), f.data(), k, 0.75f, gc.data(), bc.data(), d, 1e-5,
                                     true, stream, t.data(), &forward);
        b = ops.add_layer_norm_forward_row_narrow(s2.data(), y2.data(), h.data(), f.data(), k, 0.75f, n.g(), n.b(), d,
                                                  1e-5, stream, t.data(), &forward);
      } else {
        a = ops.add_norm_forward_row_f32(s1.data(), y1.data(), h.data(), f.data(), k, 0.75f, gc.data(), bc.data(), d,
                                         1e-5, true, stream, t.data(), &forward);
        b = ops.add_layer_norm_forward_row_narrow_f32(s2.data(), y2.data(), h.data(), f.data(), k, 0.75f, n.g(), n.b(),
                                                      d, 1e-5, stream, t.data(), &forward);
      }
      EXPECT_TRUE(same_bytes(s1, s2, static_cast<size_t>(d))) << "s";
      EXPECT_TRUE(same_bytes(y1, y2, static_cast<size_t>(d))) << "y";
      EXPECT_EQ(a.mean, b.mean);
      EXPECT_EQ(a.rstd, b.rstd);
    }
}

template <class T>
void check_batch(int64_t count, int64_t d, Form form = Form::kNarrow, bool stream = false) {
  SCOPED_TRACE(std::string(narrow_name<T>()) + (form == Form::kPlain ? " plain" : "") + " count " +
               std::to_string(count) + " d " + std::to_string(d) + (stream ? ", streamed" : ""));
  const auto& ops = addnorm::detail::row_ops<T>();
  ASSERT_TRUE(form == Form::kPlain ? ops.ln_forward_rows_plain != nullptr : ops.ln_forward_rows_narrow != nullptr);
  const Params<T> p(d);
  const int64_t stride = d + 3;  // rows off their lines
  addnorm::testing::Rng rng(static_cast<uint64_t>(count * 100 + d));
  // (count + 16) rows: a batch prefetches the rows after it (`ahead`).
  const auto x = addnorm::testing::random_vector<T>((count + 16) * stride, rng, -1.0, 3.0);
  std::vector<T> y1(x.size()), y2(x.size());
  RowMeanRstd s1[40], s2[40];
  ops.ln_forward_rows(y1.data(), stride, x.data(), stride, p.gc.data(), p.bc.data(), count, d, 1e-5, stream, count, s1);
  if (form == Form::kPlain)
    ops.ln_forward_rows_plain(y2.data(), stride, x.data(), stride, p.gamma.data(), p.beta.data(), count, d, 1e-5,
                              stream, count, s2);
  else
    ops.ln_forward_rows_narrow(y2.data(), stride, x.data(), stride, p.gn.data(),
                               std::is_same_v<T, bf16> ? nullptr : p.bn.data(), count, d, 1e-5, stream, count, s2);
  EXPECT_TRUE(same_bytes(y1, y2, y1.size()));
  for (int64_t r = 0; r < count; ++r) {
    EXPECT_EQ(s1[r].mean, s2[r].mean) << "row " << r;
    EXPECT_EQ(s1[r].rstd, s2[r].rstd) << "row " << r;
  }
}

TEST(NarrowAffine, OneRowGivesTheSameBitsAsTwoF32Arrays) {
  addnorm::testing::for_each_simd_target([] {
    for (int64_t d : {16, 100, 4096, 4100, 5120})
      for (int64_t shift : {0, 3}) {
        check_one_row<bf16>(d, shift);
        check_one_row<f16>(d, shift);
      }
  });
}

TEST(NarrowAffine, FusedRowGivesTheSameBitsAsTwoF32Arrays) {
  addnorm::testing::for_each_simd_target([] {
    for (int64_t d : {16, 100, 4096, 4100, 5120})
      for (int64_t shift : {0, 3}) {
        check_fused_row<bf16, bf16>(d, shift);
        check_fused_row<bf16, float>(d, shift);
        check_fused_row<f16, f16>(d, shift);
        check_fused_row<f16, float>(d, shift);
      }
  });
}

TEST(NarrowAffine, BatchesGiveTheSameBitsAsTwoF32Arrays) {
  addnorm::testing::for_each_simd_target([] {
    for (int64_t count : {1, 5, 16, 17, 40})
      for (int64_t d : {16, 100, 1000, 4100}) {
        check_batch<bf16>(count, d);
        check_batch<f16>(count, d);
      }
  });
}

// The AVX2 target's bf16 LayerNorm forward with gamma and beta as two bf16 arrays
// (RowOps::ln_forward_plain and ln_forward_rows_plain, read by parity: map2 in vec_map.inc) must
// give the bits of the kernels that read two f32 arrays (read in order), as above. The targets
// without them are skipped; the AVX2 target has them, and runs wherever AVX2 does.
TEST(NarrowAffine, PlainBf16ArraysGiveTheSameBitsAsTwoF32Arrays) {
  int targets_with_plain = 0;
  addnorm::testing::for_each_simd_target([&] {
    if (addnorm::detail::row_ops<bf16>().ln_forward_plain == nullptr) return;
    ++targets_with_plain;
    for (int64_t d : {16, 100, 128, 768, 4096, 4100})
      for (int64_t shift : {0, 3}) check_one_row<bf16>(d, shift, Form::kPlain);
    for (int64_t count : {1, 5, 16, 17, 40})
      for (int64_t d : {16, 64, 100, 128, 1000, 4100})
        for (bool stream : {false, true})
          if (!stream || d <= 1000) check_batch<bf16>(count, d, Form::kPlain, stream);  // streamed: rows under 3 KiB
  });
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_GE(targets_with_plain, 1) << "the AVX2 target has no plain form";
  }
}

// packed_affine (src/norm/workspace.hpp): gamma's bits high, beta's low, at the offset placed_for
// gives a vector of 4-byte elements.
TEST(NarrowAffine, PackedAffinePutsGammaHighAndBetaLow) {
  const Params<bf16> p(37);
  std::vector<bf16> out(37);
  const Bf16Affine* gb = addnorm::detail::packed_affine(p.gamma, p.beta, out.data(), 37, false);
  for (size_t i = 0; i < 37; ++i) {
    EXPECT_EQ(gb[i].bits >> 16, p.gamma[i].bits) << i;
    EXPECT_EQ(gb[i].bits & 0xffffu, p.beta[i].bits) << i;
  }
}

// The public LayerNorm forward and fused pre-norm forward on rows of d (wide: the narrow paths),
// streamed and not, against the f64 reference, with gamma and beta far from 1 and 0 so that a
// mix-up shows.
template <class T>
void check_wide_rows(int64_t d) {
  for (int64_t rows : {3, 40, 1100}) {  // 1100 rows of 4100 2-byte elements: over 8 MiB, streamed
    SCOPED_TRACE(std::string(narrow_name<T>()) + " rows " + std::to_string(rows) + " d " + std::to_string(d));
    addnorm::testing::Rng rng(static_cast<uint64_t>(rows));
    const auto x = addnorm::testing::random_vector<T>(rows * d, rng, 2.0, 3.0);
    const auto gamma = addnorm::testing::random_vector<T>(d, rng, 3.0, 1.0);
    const auto beta = addnorm::testing::random_vector<T>(d, rng, -2.0, 1.0);
    std::vector<T> y(x.size());
    std::vector<float> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
    addnorm::layer_norm_forward<T>(addnorm::View2D<T>(y.data(), rows, d), mean, rstd,
                                   addnorm::View2D<const T>(x.data(), rows, d), gamma, beta, 1e-5);
    const auto ref =
        addnorm::ref::layer_norm_forward<T>(addnorm::View2D<const T>(x.data(), rows, d), gamma, beta, 1e-5);
    const auto close = [](const std::vector<T>& got, const std::vector<double>& want) {
      for (size_t i = 0; i < got.size(); ++i)
        if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= 8e-3 * std::max(1.0, std::abs(want[i]))))
          return ::testing::AssertionFailure()
                 << "element " << i << ": " << static_cast<double>(got[i]) << " vs " << want[i];
      return ::testing::AssertionSuccess();
    };
    ASSERT_TRUE(close(y, ref.y)) << "layer_norm_forward";

    // The fused pre-norm forward with x as h and f = x / 2: s = h + f, y = LayerNorm(s).
    std::vector<T> f(x.size()), s(x.size()), s_ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) f[i] = T(static_cast<float>(x[i]) * 0.5f);
    addnorm::add_norm_forward<T>(addnorm::View2D<T>(s.data(), rows, d), addnorm::View2D<T>(y.data(), rows, d), mean,
                                 rstd, addnorm::View2D<const T>(x.data(), rows, d),
                                 addnorm::View2D<const T>(f.data(), rows, d), gamma, beta, {});
    std::vector<double> s_exact(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      s_exact[i] = static_cast<double>(x[i]) + static_cast<double>(f[i]);
      s_ref[i] = T(static_cast<float>(s_exact[i]));
    }
    ASSERT_TRUE(close(s, s_exact)) << "add_norm_forward s";
    const auto fused_ref =
        addnorm::ref::layer_norm_forward<T>(addnorm::View2D<const T>(s_ref.data(), rows, d), gamma, beta, 1e-5);
    ASSERT_TRUE(close(y, fused_ref.y)) << "add_norm_forward y";
  }
}

TEST(NarrowAffine, WideRowsMatchTheReference) {
  addnorm::testing::for_each_simd_target([] {
    check_wide_rows<bf16>(4100);
    check_wide_rows<bf16>(1100);  // the plain form's batches on AVX2 (ln_plain_cols)
    check_wide_rows<f16>(5200);
  });
}

}  // namespace
