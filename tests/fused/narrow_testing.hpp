// Helpers shared by the tests of the kernels that read parameters in a narrow form
// (test_narrow_affine.cpp, test_narrow_gamma.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "../../src/simd/row_ops.hpp"

namespace addnorm::testing {

// Whether the first n elements of a and b hold the same bytes.
template <class V>
bool same_bytes(const V& a, const V& b, size_t n) {
  return std::memcmp(a.data(), b.data(), n * sizeof(*a.data())) == 0;
}

template <class T>
const char* narrow_name() {
  return std::is_same_v<T, bf16> ? "bf16" : "f16";
}

// f(next, stream) for a row kernel's six ways to run a row of d elements of T: no next row, a next
// row (zeros) walked forward and walked backward, each streamed and not, in a SCOPED_TRACE.
template <class T, class F>
void for_each_walk(int64_t d, F&& f) {
  using detail::NextRows;
  const std::vector<T> n0(static_cast<size_t>(d));
  const NextRows forward = NextRows::of(n0.data()).then(true, 0);
  NextRows backward = forward;
  backward.backward = true;
  for (const NextRows* next :
       {static_cast<const NextRows*>(nullptr), &forward, static_cast<const NextRows*>(&backward)})
    for (bool stream : {false, true}) {
      SCOPED_TRACE(std::string(next == nullptr  ? "no next row"
                               : next->backward ? "walked backward"
                                                : "walked forward") +
                   (stream ? ", streamed" : ""));
      f(next, stream);
    }
}

}  // namespace addnorm::testing
