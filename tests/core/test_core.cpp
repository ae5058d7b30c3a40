// core: Error messages, View2D checks, thread settings.
#include <gtest/gtest.h>

#include <string>

#include "addnorm/core/error.hpp"
#include "addnorm/core/parallel.hpp"
#include "addnorm/core/version.hpp"
#include "addnorm/core/view.hpp"

namespace {

TEST(Error, MessageStartsWithFunctionName) {
  try {
    addnorm::fail("layer_norm", "eps must be > 0, got ", -1);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "[layer_norm] eps must be > 0, got -1");
  }
}

TEST(Error, RequirePassesWhenTrue) {
  EXPECT_NO_THROW(addnorm::require(true, "f", "never"));
  EXPECT_THROW(addnorm::require(false, "f", "always"), addnorm::Error);
}

TEST(View2D, PackedAndStrided) {
  float buf[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  addnorm::View2D<float> packed(buf, 3, 4);
  EXPECT_EQ(packed.stride(), 4);
  EXPECT_EQ(packed(2, 1), 9.0f);
  addnorm::View2D<float> strided(buf + 1, 2, 3, 5);
  EXPECT_EQ(strided(1, 2), 8.0f);
  EXPECT_EQ(strided.row_span(1).size(), 3u);
  addnorm::View2D<const float> c = strided;
  EXPECT_EQ(c(0, 0), 1.0f);
}

TEST(View2D, RejectsBadShapes) {
  float buf[4] = {};
  EXPECT_THROW(addnorm::View2D<float>(buf, -1, 2), addnorm::Error);
  EXPECT_THROW(addnorm::View2D<float>(buf, 2, 4, 3), addnorm::Error);
  EXPECT_THROW(addnorm::View2D<float>(nullptr, 2, 2), addnorm::Error);
  EXPECT_THROW(addnorm::View2D<float>(buf, int64_t{1} << 40, int64_t{1} << 30), addnorm::Error);
  EXPECT_NO_THROW(addnorm::View2D<float>(nullptr, 0, 5));
  try {
    addnorm::View2D<float>(buf, 2, 4, 3);
  } catch (const addnorm::Error& e) {
    EXPECT_EQ(std::string(e.what()), "[View2D] row stride 3 is smaller than cols 4");
  }
}

TEST(Parallel, ThreadSettings) {
  const int before = addnorm::num_threads();
  addnorm::set_num_threads(3);
  EXPECT_EQ(addnorm::num_threads(), 3);
  EXPECT_EQ(addnorm::threads_for(10, 1000), 1);
  EXPECT_EQ(addnorm::threads_for(1000000, 1000), 3);
  EXPECT_EQ(addnorm::threads_for(2500, 1000), 2);
  EXPECT_THROW(addnorm::set_num_threads(0), addnorm::Error);
  addnorm::set_num_threads(before);
}

TEST(Version, IsSet) { EXPECT_STRNE(addnorm::version_string, ""); }

}  // namespace
