// NumPy arrays as addnorm's views: the element type of an array (float32 = f32, float64 = f64,
// float16 = f16, uint16 = bf16 bit patterns), its rows and row length, new output arrays, and
// the argument checks of every binding. Errors name the Python function:
// TypeError("[addnorm.layer_norm_forward] gamma has dtype float64; expected float32").
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "addnorm/core/dtype.hpp"
#include "addnorm/core/view.hpp"
#include "addnorm/norm/types.hpp"
#include "dispatch.hpp"

namespace addnorm::py_bind {

inline const char* dt_name(Dt dt) {
  switch (dt) {
    case Dt::f32:
      return "float32";
    case Dt::f64:
      return "float64";
    case Dt::f16:
      return "float16";
    case Dt::bf16:
      break;
  }
  return "uint16 (bf16 bits)";
}

// The NumPy dtype of an element type, and of its statistics (float32, or float64 for f64).
py::dtype numpy_dtype(Dt dt);
py::dtype stat_dtype(Dt dt);

// "(2, 3)" for error messages.
std::string shape_str(const py::array& a);

// One argument of a binding: the array (C-contiguous; a copy when the caller's was not), its
// element type, and its shape read as rows x d (d = the last axis, rows = the product of the rest).
struct Data {
  py::array arr;  // (a default py::array is an empty array, not a null handle: `present` tells)
  bool present = false;
  Dt dt = Dt::f32;
  int64_t rows = 0;
  int64_t d = 0;

  [[nodiscard]] std::vector<py::ssize_t> shape() const;
  [[nodiscard]] std::vector<py::ssize_t> lead_shape() const;  // the shape without its last axis
  template <class T>
  [[nodiscard]] View2D<const T> view() const {
    return View2D<const T>(static_cast<const T*>(arr.data()), rows, d);
  }
  template <class T>
  [[nodiscard]] std::span<const T> span() const {
    return {static_cast<const T*>(arr.data()), static_cast<size_t>(arr.size())};
  }
};

// Reads obj (any array-like) as data: at least one axis, element type one of the four.
Data data_arg(const py::handle& obj, const char* fn, const char* name);
// The same, and its dtype must be dt and its shape `like`'s (x and dy of one call).
Data data_like(const py::handle& obj, const char* fn, const char* name, const Data& like);
// An optional vector of d elements of type dt (gamma, beta); None = absent (an empty Data).
Data vector_arg(const py::object& obj, const char* fn, const char* name, Dt dt, int64_t d);
// Saved statistics of n elements in dt's statistics type (mean, rstd); None = absent unless
// required (then None is a TypeError).
Data stats_arg(const py::object& obj, const char* fn, const char* name, Dt dt, int64_t n, bool required);
// A running statistic updated in place: a writable C-contiguous array of n elements of dt's
// statistics type, never a copy (a copy would drop the update). None = absent (None returned).
py::object inplace_stats_arg(const py::object& obj, const char* fn, const char* name, Dt dt, int64_t n);
// A row mask (bool or uint8, n elements) as bytes; None = absent (an empty span).
std::span<const uint8_t> mask_arg(const py::object& obj, const char* fn, int64_t n, py::array& keep);

// Throws ValueError("[addnorm.fn] what").
[[noreturn]] void value_error(const char* fn, const std::string& what);
// Throws TypeError("[addnorm.fn] what").
[[noreturn]] void type_error(const char* fn, const std::string& what);

// An input of a call, as an output given with out= sees it: `may_be` when the kernel allows that
// output to be this input's own memory (LayerNorm's y = x); any other overlap is refused.
struct Input {
  const char* name;
  const Data* data;
  bool may_be = false;
};

// The output array of a call: `out` when given (a writable C-contiguous array of like's dtype and
// shape, disjoint from every input but one it may be), else a new array like `like`. `name` is how
// errors call it ("out", "out[1]").
py::array out_arg(const py::object& out, const char* fn, const Data& like, std::initializer_list<Input> inputs,
                  const char* name = "out");
// The two outputs of a call given as out=(a, b), each checked as out_arg; None = two new arrays.
std::pair<py::array, py::array> out_pair(const py::object& out, const char* fn, const Data& like0,
                                         std::initializer_list<Input> inputs0, const Data& like1,
                                         std::initializer_list<Input> inputs1);

// New arrays (uninitialized; the kernels overwrite them).
py::array new_array(Dt dt, const std::vector<py::ssize_t>& shape);
py::array new_stats(Dt dt, const std::vector<py::ssize_t>& shape);
// New zeroed arrays of d elements (parameter gradients, which the kernels accumulate into).
py::array new_zeros(Dt dt, int64_t d);

template <class T>
View2D<T> out_view(py::array& a, int64_t rows, int64_t d) {
  return View2D<T>(static_cast<T*>(a.mutable_data()), rows, d);
}
template <class T>
std::span<T> out_span(py::array& a) {
  return {static_cast<T*>(a.mutable_data()), static_cast<size_t>(a.size())};
}
// An absent output (None) as an empty span.
template <class T>
std::span<T> out_span_or_empty(py::object& a) {
  if (a.is_none()) return {};
  auto arr = py::reinterpret_borrow<py::array>(a);
  return out_span<T>(arr);
}
template <class T>
std::span<const T> in_span(const Data& a) {
  if (!a.present) return {};
  return a.span<T>();
}

}  // namespace addnorm::py_bind
