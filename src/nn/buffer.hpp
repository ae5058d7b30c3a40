// Activation and gradient buffers: resized when the shape changes, reused otherwise, so a
// training loop at a fixed shape allocates only in its first step.
#pragma once

#include <cstdint>
#include <vector>

#include "addnorm/core/view.hpp"

namespace addnorm::nn {

// v sized to exactly n elements; reallocates only when n exceeds the capacity.
template <class T>
T* sized(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// v sized to rows * cols, as a packed view.
template <class T>
View2D<T> sized_view(std::vector<T>& v, int64_t rows, int64_t cols) {
  return {sized(v, rows * cols), rows, cols};
}

template <class T>
View2D<const T> cview(const std::vector<T>& v, int64_t rows, int64_t cols) {
  return {v.data(), rows, cols};
}

}  // namespace addnorm::nn
