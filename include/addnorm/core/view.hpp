// View2D<T>: a non-owning rows x cols view with a contiguous last dimension and a row stride
// counted in elements (stride >= cols). All sizes are 64-bit.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "addnorm/core/error.hpp"

namespace addnorm {

template <class T>
class View2D {
 public:
  using value_type = std::remove_const_t<T>;

  constexpr View2D() = default;

  // A packed rows x cols view (stride = cols).
  View2D(T* data, int64_t rows, int64_t cols) : View2D(data, rows, cols, cols) {}

  // A rows x cols view whose row r starts at data + r * stride. Checked: sizes are not negative,
  // stride >= cols, rows * stride does not overflow, and data is not null unless the view is empty.
  View2D(T* data, int64_t rows, int64_t cols, int64_t stride) : data_(data), rows_(rows), cols_(cols), stride_(stride) {
    require(rows >= 0 && cols >= 0, "View2D", "negative shape (", rows, ", ", cols, ")");
    require(stride >= cols, "View2D", "row stride ", stride, " is smaller than cols ", cols);
    require(rows == 0 || stride == 0 || rows <= std::numeric_limits<int64_t>::max() / stride, "View2D",
            "rows * stride overflows: ", rows, " * ", stride);
    require(data != nullptr || rows * cols == 0, "View2D", "null data for a ", rows, " x ", cols, " view");
  }

  // A const view of a mutable one.
  template <class U>
  requires(std::is_same_v<T, const U>)
      View2D(const View2D<U>& other)  // NOLINT(google-explicit-constructor): T* -> const T* is safe
      : data_(other.data()), rows_(other.rows()), cols_(other.cols()), stride_(other.stride()) {}

  [[nodiscard]] T* data() const { return data_; }
  [[nodiscard]] int64_t rows() const { return rows_; }
  [[nodiscard]] int64_t cols() const { return cols_; }
  [[nodiscard]] int64_t stride() const { return stride_; }
  [[nodiscard]] bool empty() const { return rows_ == 0 || cols_ == 0; }
  [[nodiscard]] T* row(int64_t r) const { return data_ + r * stride_; }
  [[nodiscard]] std::span<T> row_span(int64_t r) const { return {row(r), static_cast<size_t>(cols_)}; }
  [[nodiscard]] T& operator()(int64_t r, int64_t c) const { return data_[r * stride_ + c]; }

 private:
  T* data_ = nullptr;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t stride_ = 0;
};

}  // namespace addnorm
