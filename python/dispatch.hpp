// What both Python extensions share: the four element types as a value (Dt) and the calls that
// turn one into a C++ type (visit, visit_stream), and the errors that name the Python function:
// fail<py::type_error>("layer_norm_forward", ...) raises TypeError("[addnorm.layer_norm_forward] ...").
#pragma once

#include <pybind11/pybind11.h>

#include <sstream>
#include <type_traits>

#include "addnorm/core/dtype.hpp"

namespace addnorm::py_bind {

namespace py = pybind11;

enum class Dt { f32, f64, f16, bf16 };

// A type carried as a value, for visit().
template <class T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with the C++ type of dt.
template <class F>
decltype(auto) visit(Dt dt, F&& f) {
  switch (dt) {
    case Dt::f32:
      return f(Tag<float>{});
    case Dt::f64:
      return f(Tag<double>{});
    case Dt::f16:
      return f(Tag<f16>{});
    case Dt::bf16:
      break;
  }
  return f(Tag<bf16>{});
}

// Calls f(Tag<T>{}, Tag<R>{}) for data type dt and residual-stream type rt: R = T, or float for
// 16-bit data with an f32 stream (the caller has checked that the pair is one of those).
template <class F>
void visit_stream(Dt dt, Dt rt, F&& f) {
  visit(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
      if (rt == Dt::f32) return f(tag, Tag<float>{});
    }
    f(tag, tag);
  });
}

// Throws E("[addnorm.<fn>] " + parts...), E a pybind11 exception (py::type_error, py::value_error).
template <class E, class... Parts>
[[noreturn]] void fail(const char* fn, const Parts&... parts) {
  std::ostringstream os;
  os << "[addnorm." << fn << "] ";
  (os << ... << parts);
  throw E(os.str());
}

}  // namespace addnorm::py_bind
