// The kernels' per-thread scratch buffers (src/norm/workspace.hpp): each starts on a cache line,
// grows as std::vector::resize would (old elements kept, new ones zero), and slots are distinct.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>

#include "../../src/norm/workspace.hpp"

namespace {

using addnorm::detail::kScratchAlign;
using addnorm::detail::scratch;

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

}  // namespace
