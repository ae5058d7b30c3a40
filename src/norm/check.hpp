// Argument checks shared by the normalization kernels. Each throws addnorm::Error with a message
// that starts with the kernel's name.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "addnorm/core/error.hpp"
#include "addnorm/core/view.hpp"

namespace addnorm::detail {

inline void check_eps(double eps, const char* fn) {
  require(std::isfinite(eps) && eps > 0, fn, "eps must be finite and > 0, got ", eps);
}

inline void check_d(int64_t d, const char* fn, const char* name) {
  require(d > 0, fn, name, " has d = 0 columns; d must be >= 1");
}

template <class A, class B>
void check_same_shape(View2D<A> a, const char* a_name, View2D<B> b, const char* b_name, const char* fn) {
  require(a.rows() == b.rows() && a.cols() == b.cols(), fn, a_name, " is ", a.rows(), " x ", a.cols(), " but ", b_name,
          " is ", b.rows(), " x ", b.cols());
}

// A span that must have `expected` elements, or be empty when optional.
template <class T>
void check_size(std::span<T> s, int64_t expected, bool optional, const char* fn, const char* name) {
  if (optional && s.empty()) return;
  require(static_cast<int64_t>(s.size()) == expected, fn, name, " has ", s.size(), " elements, expected ", expected);
}

}  // namespace addnorm::detail
