// ReZero's residual add, s = h + a * Dropout(f), and its backward (dh = ds, df = a * Dropout'(ds),
// da += sum(ds * Dropout(f))), on every SIMD target the CPU supports and for every element type
// (f32, f64, bf16, f16): against an f64 computation from the stored inputs, on contiguous and
// strided views (the kernels cut contiguous calls into runs across rows, strided ones row by row),
// widths with tails of every length, misaligned rows, rows longer than a run, outputs large enough
// to be streamed, in place (s = h), and for 1-3 threads.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::bf16;
using addnorm::DropoutSpec;
using addnorm::f16;
using addnorm::View2D;
using addnorm::testing::describe;
using addnorm::testing::dtype_name;
using addnorm::testing::Rng;
using addnorm::testing::ScopedThreads;
using addnorm::testing::throws_error;

// The rounding of one stored result (half an ulp of T at 1), and of the math type's few operations
// before it (f32 for f32/bf16/f16, f64 for f64), relative to the magnitude of the terms.
template <class T>
double tol() {
  if constexpr (std::is_same_v<T, float>) return 3e-7;
  if constexpr (std::is_same_v<T, double>) return 6e-16;
  if constexpr (std::is_same_v<T, bf16>) return 4e-3;
  return 5e-4;
}
// Half the smallest step of T near zero, where f16's subnormals are coarser than a relative bound.
template <class T>
double floor_of() {
  return std::is_same_v<T, f16> ? 3e-8 : 1e-300;
}
// The math type's unit roundoff (for a's gradient, a sum in double of products rounded in it).
template <class T>
double math_eps() {
  return std::is_same_v<T, double> ? 1.2e-16 : 6e-8;
}

// A (rows, d) matrix of T with row stride d + pad, starting `shift` elements into its buffer, the
// elements before and after filled with a guard value that must survive every call.
template <class T>
struct Mat {
  int64_t rows, d, stride, shift;
  std::vector<T> buf;
  Mat(int64_t r, int64_t cols, int64_t pad, int64_t sh)
      : rows(r), d(cols), stride(cols + pad), shift(sh), buf(static_cast<size_t>(sh + r * (cols + pad) + 8), guard()) {}
  static T guard() { return static_cast<T>(-1234.5); }
  void fill(Rng& rng, double sd) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) (*this)(r, c) = static_cast<T>(rng.normal(0, sd));
  }
  T& operator()(int64_t r, int64_t c) { return buf[static_cast<size_t>(shift + r * stride + c)]; }
  [[nodiscard]] double at(int64_t r, int64_t c) const {
    return static_cast<double>(buf[static_cast<size_t>(shift + r * stride + c)]);
  }
  View2D<T> view() { return View2D<T>(buf.data() + shift, rows, d, stride); }
  [[nodiscard]] View2D<const T> cview() const { return View2D<const T>(buf.data() + shift, rows, d, stride); }
  // Every slot outside the elements still holds the guard.
  [[nodiscard]] bool gaps_intact() const {
    for (int64_t i = 0; i < static_cast<int64_t>(buf.size()); ++i) {
      const int64_t rel = i - shift;
      const bool element = d > 0 && rel >= 0 && rel < rows * stride && rel % stride < d;
      if (!element && static_cast<double>(buf[static_cast<size_t>(i)]) != static_cast<double>(guard())) return false;
    }
    return true;
  }
  // The elements' bits, packed.
  [[nodiscard]] std::vector<uint16_t> bits16() const {
    std::vector<uint16_t> out;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) {
        uint64_t b = 0;
        std::memcpy(&b, &buf[static_cast<size_t>(shift + r * stride + c)], sizeof(T));
        for (size_t k = 0; k < sizeof(T); k += 2) out.push_back(static_cast<uint16_t>(b >> (8 * k)));
      }
    return out;
  }
};

// The dropout factor of element (r, c) of a (rows, d) call: 0 or 1 / (1 - p), in double.
double keep_factor(const DropoutSpec& drop, int64_t r, int64_t c, int64_t d) {
  if (!drop.active()) return 1.0;
  return drop.keep(static_cast<uint64_t>(r * d + c)) ? drop.scale() : 0.0;
}

// Forward and backward of one case against f64; also in place, and for 1-3 threads.
template <class T>
void check_rezero(int64_t rows, int64_t d, int64_t pad, int64_t shift, double p) {
  SCOPED_TRACE(describe(dtype_name<T>(), " ", rows, " x ", d, " pad ", pad, " shift ", shift, " p ", p));
  Rng rng(static_cast<uint64_t>(rows * 7919 + d * 31 + pad * 7 + shift + static_cast<int64_t>(p * 100)));
  Mat<T> h(rows, d, pad, shift), f(rows, d, pad, shift), ds(rows, d, pad, shift);
  h.fill(rng, 1.0);
  f.fill(rng, 2.0);
  ds.fill(rng, 1.0);
  const DropoutSpec drop{p, 1234, 77};
  const double a = 0.3;
  const auto ac = static_cast<double>(static_cast<addnorm::compute_t<T>>(a));  // a as the kernels hold it

  Mat<T> s(rows, d, pad, shift);
  addnorm::rezero_forward<T>(s.view(), h.cview(), f.cview(), a, drop);
  ASSERT_TRUE(s.gaps_intact()) << "rezero_forward wrote outside s";
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const double kf = keep_factor(drop, r, c, d) * f.at(r, c);
      const double want = h.at(r, c) + ac * kf;
      const double err = std::abs(s.at(r, c) - want);
      ASSERT_LE(err, tol<T>() * (std::abs(h.at(r, c)) + std::abs(ac * kf)) + floor_of<T>())
          << "s(" << r << ", " << c << ") = " << s.at(r, c) << ", f64 " << want;
      if (keep_factor(drop, r, c, d) == 0.0) {
        ASSERT_EQ(s.at(r, c), h.at(r, c)) << "a dropped element changed h";
      }
    }

  // In place (s = h): the same bits.
  Mat<T> hs = h;
  addnorm::rezero_forward<T>(hs.view(), hs.cview(), f.cview(), a, drop);
  ASSERT_EQ(hs.bits16(), s.bits16()) << "in place";

  Mat<T> dh(rows, d, pad, shift), df(rows, d, pad, shift);
  double da = 0.25;  // accumulates
  addnorm::rezero_backward<T>(dh.view(), df.view(), da, ds.cview(), f.cview(), a, drop);
  ASSERT_TRUE(dh.gaps_intact() && df.gaps_intact()) << "rezero_backward wrote outside dh or df";
  ASSERT_EQ(dh.bits16(), ds.bits16()) << "dh is not ds";
  double want_da = 0, mag = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const double k = keep_factor(drop, r, c, d);
      const double want = ac * k * ds.at(r, c);
      ASSERT_LE(std::abs(df.at(r, c) - want), tol<T>() * std::abs(want) + floor_of<T>())
          << "df(" << r << ", " << c << ") = " << df.at(r, c) << ", f64 " << want;
      if (k == 0.0) {
        ASSERT_EQ(df.at(r, c), 0.0) << "forward and backward disagree on the mask";
      }
      want_da += ds.at(r, c) * k * f.at(r, c);
      mag += std::abs(ds.at(r, c) * k * f.at(r, c));
    }
  ASSERT_LE(std::abs((da - 0.25) - want_da), 4 * math_eps<T>() * mag + 1e-300)
      << "da " << da - 0.25 << ", f64 " << want_da;

  // The same bits for any thread count, a's gradient included (calls of 64 Ki elements or more
  // take more than one thread).
  if (rows * d < (int64_t{1} << 16)) return;
  for (int threads : {1, 2, 3}) {
    ScopedThreads scoped(threads);
    Mat<T> s2(rows, d, pad, shift), dh2(rows, d, pad, shift), df2(rows, d, pad, shift);
    addnorm::rezero_forward<T>(s2.view(), h.cview(), f.cview(), a, drop);
    double da2 = 0.25;
    addnorm::rezero_backward<T>(dh2.view(), df2.view(), da2, ds.cview(), f.cview(), a, drop);
    ASSERT_EQ(s2.bits16(), s.bits16()) << threads << " threads";
    ASSERT_EQ(df2.bits16(), df.bits16()) << threads << " threads";
    ASSERT_EQ(std::bit_cast<uint64_t>(da2), std::bit_cast<uint64_t>(da)) << threads << " threads: " << da2 << " " << da;
  }
}

template <class T>
void check_all_shapes() {
  for (double p : {0.0, 0.15}) {
    for (int64_t d : {1, 7, 15, 16, 17, 31, 32, 33, 47, 64, 100, 129, 768})
      for (int64_t rows : {1, 3, 19}) {
        check_rezero<T>(rows, d, 0, 0, p);  // contiguous: runs across rows
        check_rezero<T>(rows, d, 3, 1, p);  // strided and misaligned: row by row
      }
    check_rezero<T>(2, 5000, 0, 0, p);  // runs inside a row (2048 elements each)
    check_rezero<T>(3, 5000, 5, 3, p);
    check_rezero<T>(1, 0, 0, 0, p);
    check_rezero<T>(0, 8, 0, 0, p);
  }
  // Outputs over the streaming threshold (8 MiB of s; of dh and df together for the backward),
  // aligned and not.
  const auto rows = static_cast<int64_t>((size_t{9} << 20) / (2048 * sizeof(T)) + 1);
  check_rezero<T>(rows, 2048, 0, 0, 0.1);
  check_rezero<T>(rows / 2, 4096 + 5, 3, 1, 0.0);
}

class ReZeroTargets : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    saved_ = addnorm::simd_target();
    addnorm::set_simd_target(GetParam());
  }
  void TearDown() override { addnorm::set_simd_target(saved_); }
  std::string saved_;
};

TEST_P(ReZeroTargets, F32) { check_all_shapes<float>(); }
TEST_P(ReZeroTargets, F64) { check_all_shapes<double>(); }
TEST_P(ReZeroTargets, Bf16) { check_all_shapes<bf16>(); }
TEST_P(ReZeroTargets, F16) { check_all_shapes<f16>(); }

INSTANTIATE_TEST_SUITE_P(SupportedTargets, ReZeroTargets, ::testing::ValuesIn(addnorm::supported_simd_targets()),
                         [](const auto& p) { return p.param; });

// The same call on every target: the same s for f64 and for the f32 targets with FMA (avx512bf16,
// avx512, avx2), whose mul_add rounds once; a's gradient to a few roundings of its terms.
TEST(ReZero, TargetsAgree) {
  const int64_t rows = 37, d = 300;
  Rng rng(5);
  Mat<float> h(rows, d, 0, 0), f(rows, d, 0, 0), ds(rows, d, 0, 0);
  h.fill(rng, 1.0);
  f.fill(rng, 1.0);
  ds.fill(rng, 1.0);
  const DropoutSpec drop{0.2, 9, 0};
  std::vector<std::vector<uint16_t>> s_bits;
  std::vector<double> das;
  for (const std::string& target : addnorm::supported_simd_targets()) {
    if (target == "generic") continue;  // no FMA: keep * f * a rounded twice
    addnorm::testing::ScopedSimdTarget scoped(target);
    Mat<float> s(rows, d, 0, 0), dh(rows, d, 0, 0), df(rows, d, 0, 0);
    addnorm::rezero_forward<float>(s.view(), h.cview(), f.cview(), -1.7, drop);
    double da = 0;
    addnorm::rezero_backward<float>(dh.view(), df.view(), da, ds.cview(), f.cview(), -1.7, drop);
    s_bits.push_back(s.bits16());
    das.push_back(da);
  }
  for (size_t i = 1; i < s_bits.size(); ++i) {
    EXPECT_EQ(s_bits[i], s_bits[0]) << "target " << i;
    EXPECT_NEAR(das[i], das[0], 1e-9 * std::abs(das[0]) + 1e-12);
  }
}

// Non-finite inputs pass through as IEEE arithmetic gives them; a dropped Inf or NaN of f is
// multiplied by 0 (NaN), as in the reference.
TEST(ReZero, NonFiniteValuesPropagate) {
  std::vector<float> h{1.0f, std::numeric_limits<float>::infinity(), 2.0f, 3.0f};
  std::vector<float> f{std::numeric_limits<float>::quiet_NaN(), 1.0f, 2.0f, std::numeric_limits<float>::infinity()};
  std::vector<float> s(4);
  addnorm::rezero_forward<float>(View2D<float>(s.data(), 1, 4), View2D<const float>(h.data(), 1, 4),
                                 View2D<const float>(f.data(), 1, 4), 0.5, DropoutSpec{});
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_TRUE(std::isinf(s[1]) && s[1] > 0);
  EXPECT_EQ(s[2], 3.0f);
  EXPECT_TRUE(std::isinf(s[3]) && s[3] > 0);
}

TEST(ReZero, ErrorsNameTheFunction) {
  std::vector<float> a(8), b(8), c(8), e(6);
  const View2D<float> out(a.data(), 2, 4);
  const View2D<const float> in(b.data(), 2, 4), odd(e.data(), 2, 3);
  double da = 0;
  EXPECT_TRUE(throws_error([&] { addnorm::rezero_forward<float>(out, in, in, NAN, {}); }, {"rezero_forward", "a"}));
  EXPECT_TRUE(throws_error(
      [&] {
        addnorm::rezero_forward<float>(out, in, in, 1.0, DropoutSpec{1.5, 0, 0});
      },
      {"rezero_forward", "dropout p"}));
  EXPECT_TRUE(throws_error([&] { addnorm::rezero_forward<float>(out, in, odd, 1.0, {}); }, {"rezero_forward", "f"}));
  EXPECT_TRUE(
      throws_error([&] { addnorm::rezero_backward<float>(out, View2D<float>(c.data(), 2, 4), da, in, odd, 1.0, {}); },
                   {"rezero_backward", "f"}));
  EXPECT_TRUE(throws_error(
      [&] { addnorm::rezero_backward<float>(out, View2D<float>(c.data(), 2, 4), da, in, in, INFINITY, {}); },
      {"rezero_backward", "a"}));
  EXPECT_EQ(da, 0.0);
}

}  // namespace
