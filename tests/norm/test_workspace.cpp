// The kernels' per-thread scratch buffers (src/norm/workspace.hpp): each starts on a cache line,
// grows as std::vector::resize would (old elements kept, new ones zero), and slots are distinct;
// and placed_for, which puts gamma / beta where the row kernels' vector loops load them from whole lines.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../../src/norm/workspace.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::detail::kScratchAlign;
using addnorm::detail::line_offset_for;
using addnorm::detail::placed_for;
using addnorm::detail::scratch;

// A pointer `bytes` past a cache line inside buf.
template <class T>
T* past_a_line(std::vector<T>& buf, size_t bytes) {
  auto addr = reinterpret_cast<uintptr_t>(buf.data());
  addr += (kScratchAlign - addr % kScratchAlign) % kScratchAlign + bytes;
  return reinterpret_cast<T*>(addr);
}

template <class T>
bool on_a_line(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % kScratchAlign == 0;
}

TEST(Scratch, StartsOnACacheLineForEveryTypeAndSize) {
  for (size_t n : {0, 1, 3, 17, 768, 4099, 100000}) {
    EXPECT_TRUE(on_a_line(scratch<float, 40>(n))) << n;
    EXPECT_TRUE(on_a_line(scratch<double, 41>(n))) << n;
    EXPECT_TRUE(on_a_line(scratch<uint8_t, 42>(n))) << n;
    EXPECT_TRUE(on_a_line(scratch<addnorm::bf16, 43>(n))) << n;
  }
}

TEST(Scratch, GrowingKeepsTheOldElementsAndZeroesTheNew) {
  int32_t* a = scratch<int32_t, 44>(5);
  for (int i = 0; i < 5; ++i) a[i] = 10 + i;
  int32_t* b = scratch<int32_t, 44>(3);  // smaller: the same buffer
  EXPECT_EQ(a, b);
  int32_t* c = scratch<int32_t, 44>(5000);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(c[i], 10 + i) << i;
  for (int i = 5; i < 5000; ++i) ASSERT_EQ(c[i], 0) << i;
  EXPECT_TRUE(on_a_line(c));
}

TEST(Scratch, SlotsAndThreadsHaveTheirOwnBuffers) {
  float* a = scratch<float, 45>(64);
  float* b = scratch<float, 46>(64);
  EXPECT_NE(a, b);
  a[0] = 1.0f;
  b[0] = 2.0f;
  EXPECT_EQ(a[0], 1.0f);
  float* other = nullptr;
  std::thread t([&] { other = scratch<float, 45>(64); });
  t.join();
  EXPECT_NE(other, a);
}

// Rows of 1 KiB or more whose output starts 16 bytes past a line get a head up to the line (f32
// always, bf16 when streamed), so gamma's element i must sit where the rows' does.
TEST(Placement, ParametersSitLikeTheRowsTheyServe) {
  std::vector<float> rows_f(4096), rows_g(4096);
  std::vector<addnorm::bf16> rows_b(4096);
  const float* out_f = past_a_line(rows_f, 16);
  const addnorm::bf16* out_b = past_a_line(rows_b, 16);
  EXPECT_EQ((line_offset_for<float>(out_f, 768, false)), 16u);  // head of 12 f32: 48 bytes
  EXPECT_EQ((line_offset_for<float>(out_f, 200, false)), 0u);   // 800 bytes: no head
  EXPECT_EQ((line_offset_for<float>(out_b, 768, false)), 0u);   // bf16 in cache: no head
  EXPECT_EQ((line_offset_for<float>(out_b, 768, true)), 32u);   // head of 24 bf16: 96 bytes of f32
  EXPECT_EQ((line_offset_for<addnorm::bf16>(out_b, 768, true)), 16u);

  // Already in place: the caller's own array. Elsewhere: a copy at the offset, the same values.
  float* g_in_place = past_a_line(rows_g, 16);
  for (int i = 0; i < 768; ++i) g_in_place[i] = 0.5f * static_cast<float>(i);
  EXPECT_EQ((placed_for<7, float>(std::span<const float>(g_in_place, 768), out_f, 16, 768, false)), g_in_place);
  float* g_on_line = past_a_line(rows_g, 0);
  for (int i = 0; i < 768; ++i) g_on_line[i] = 0.25f * static_cast<float>(i);
  const float* copy = placed_for<7, float>(std::span<const float>(g_on_line, 768), out_f, 16, 768, false);
  ASSERT_NE(copy, g_on_line);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(copy) % kScratchAlign, 16u);
  for (int i = 0; i < 768; ++i) ASSERT_EQ(copy[i], g_on_line[i]) << i;
  // Fewer than 4 rows: the caller's array as it is (a copy would cost more than it saves).
  EXPECT_EQ((placed_for<7, float>(std::span<const float>(g_on_line, 768), out_f, 3, 768, false)), g_on_line);
  // bf16 parameters in the compute type (f32), for streamed bf16 rows 16 bytes past a line.
  std::vector<addnorm::bf16> gb(768);
  for (int i = 0; i < 768; ++i) gb[static_cast<size_t>(i)] = addnorm::bf16(static_cast<float>(i % 200));
  const float* gf = placed_for<7, float>(std::span<const addnorm::bf16>(gb), out_b, 2, 768, true);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(gf) % kScratchAlign, 32u);
  for (int i = 0; i < 768; ++i) ASSERT_EQ(gf[i], static_cast<float>(i % 200)) << i;
  EXPECT_EQ((placed_for<7, float>(std::span<const float>{}, out_f, 16, 768, false)), nullptr);
}

// 16-bit parameters in f32 (RowOps::widen, the target's vectors): every bit pattern (zeros,
// denormals, Inf, NaN of every payload) the same bits as the scalar conversion, on every SIMD target
// this CPU supports, at every length up to 3 vectors and an offset (the tails), at both placements.
template <class T>
void check_widened_bits() {
  std::vector<T> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i].bits = static_cast<uint16_t>(i);
  std::vector<T> out_buf(64 + 4096);
  const T* out = past_a_line(out_buf, 6);  // streamed rows then start a vector 3 elements on
  addnorm::testing::for_each_simd_target([&] {
    for (const bool stream : {false, true}) {
      const float* got = placed_for<7, float>(std::span<const T>(all), out, 16, 65536, stream);
      for (size_t i = 0; i < all.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(static_cast<float>(all[i])))
            << "bits 0x" << std::hex << i << (stream ? " streamed" : "");
    }
    for (size_t n = 1; n <= 50; ++n) {
      const std::span<const T> p(all.data() + 0x3f00 + n, n);  // 1.0-ish values, n of them
      const float* got = placed_for<7, float>(p, out, 16, static_cast<int64_t>(n), false);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], static_cast<float>(p[i])) << "n " << n << ", i " << i;
    }
  });
}

TEST(PlacedFor, Bf16ParametersWidenToTheSameBitsOnEveryTarget) { check_widened_bits<addnorm::bf16>(); }
TEST(PlacedFor, F16ParametersWidenToTheSameBitsOnEveryTarget) { check_widened_bits<addnorm::f16>(); }

}  // namespace
