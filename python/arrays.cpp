// NumPy arrays as addnorm's views (arrays.hpp).
#include "arrays.hpp"

#include <algorithm>
#include <sstream>

namespace addnorm::py_bind {

namespace {

// The element type of a NumPy dtype, if it is one of the four (native byte order only).
bool dt_of(const py::dtype& t, Dt& dt) {
  const char order = t.byteorder();
  if (order != '=' && order != '|' && order != '<') return false;
  const auto size = t.itemsize();
  switch (t.kind()) {
    case 'f':
      if (size == 4) dt = Dt::f32;
      if (size == 8) dt = Dt::f64;
      if (size == 2) dt = Dt::f16;
      return size == 2 || size == 4 || size == 8;
    case 'u':
      dt = Dt::bf16;
      return size == 2;
    default:
      return false;
  }
}

std::string dtype_str(const py::dtype& t) { return t.attr("name").cast<std::string>(); }

// obj as a C-contiguous array of its own dtype (a copy only when it is not one already).
py::array contiguous(const py::handle& obj, const char* fn, const char* name) {
  if (obj.is_none()) fail<py::type_error>(fn, name, " is None; expected an array");
  auto arr = py::array::ensure(obj, py::array::c_style);
  if (!arr) {
    PyErr_Clear();
    fail<py::type_error>(fn, name, " is not an array (", py::type::of(obj).attr("__name__").cast<std::string>(), ")");
  }
  return arr;
}

}  // namespace

py::dtype numpy_dtype(Dt dt) {
  switch (dt) {
    case Dt::f32:
      return py::dtype("float32");
    case Dt::f64:
      return py::dtype("float64");
    case Dt::f16:
      return py::dtype("float16");
    case Dt::bf16:
      break;
  }
  return py::dtype("uint16");
}

py::dtype stat_dtype(Dt dt) { return py::dtype(dt == Dt::f64 ? "float64" : "float32"); }

std::string shape_str(const py::array& a) {
  std::ostringstream os;
  os << '(';
  for (py::ssize_t i = 0; i < a.ndim(); ++i) os << (i ? ", " : "") << a.shape(i);
  os << (a.ndim() == 1 ? ",)" : ")");
  return os.str();
}

std::vector<py::ssize_t> Data::shape() const { return {arr.shape(), arr.shape() + arr.ndim()}; }

std::vector<py::ssize_t> Data::lead_shape() const { return {arr.shape(), arr.shape() + arr.ndim() - 1}; }

Data data_arg(const py::handle& obj, const char* fn, const char* name) {
  Data out;
  out.arr = contiguous(obj, fn, name);
  out.present = true;
  if (!dt_of(out.arr.dtype(), out.dt)) {
    fail<py::type_error>(fn, name, " has dtype ", dtype_str(out.arr.dtype()),
                         "; expected float32, float64, float16 or uint16 (bf16 bits)");
  }
  if (out.arr.ndim() < 1) fail<py::value_error>(fn, name, " is a scalar; expected an array of shape (..., d)");
  out.d = out.arr.shape(out.arr.ndim() - 1);
  out.rows = 1;
  for (py::ssize_t i = 0; i + 1 < out.arr.ndim(); ++i) out.rows *= out.arr.shape(i);
  return out;
}

Data data_like(const py::handle& obj, const char* fn, const char* name, const Data& like) {
  Data out = data_arg(obj, fn, name);
  if (out.dt != like.dt) {
    fail<py::type_error>(fn, name, " has dtype ", dt_name(out.dt), "; expected ", dt_name(like.dt),
                         " like the other data");
  }
  if (out.shape() != like.shape()) {
    fail<py::value_error>(fn, name, " has shape ", shape_str(out.arr), "; expected ", shape_str(like.arr));
  }
  return out;
}

Data vector_arg(const py::object& obj, const char* fn, const char* name, Dt dt, int64_t d) {
  if (obj.is_none()) return {};
  Data out = data_arg(obj, fn, name);
  if (out.dt != dt) fail<py::type_error>(fn, name, " has dtype ", dt_name(out.dt), "; expected ", dt_name(dt));
  if (out.arr.ndim() != 1 || out.d != d) {
    fail<py::value_error>(fn, name, " has shape ", shape_str(out.arr), "; expected (", d, ",)");
  }
  return out;
}

Data stats_arg(const py::object& obj, const char* fn, const char* name, Dt dt, int64_t n, bool required) {
  if (obj.is_none()) {
    if (required) fail<py::type_error>(fn, name, " is None; expected the forward's ", name);
    return {};
  }
  Data out;
  out.arr = contiguous(obj, fn, name);
  out.present = true;
  if (!out.arr.dtype().is(stat_dtype(dt))) {
    fail<py::type_error>(fn, name, " has dtype ", dtype_str(out.arr.dtype()), "; expected ", dtype_str(stat_dtype(dt)),
                         " (the statistics of ", dt_name(dt), " data)");
  }
  if (out.arr.size() != n) {
    fail<py::value_error>(fn, name, " has shape ", shape_str(out.arr), "; expected ", n, " elements");
  }
  out.dt = dt == Dt::f64 ? Dt::f64 : Dt::f32;
  out.rows = 1;
  out.d = n;
  return out;
}

py::object inplace_stats_arg(const py::object& obj, const char* fn, const char* name, Dt dt, int64_t n) {
  if (obj.is_none()) return py::none();
  if (!py::isinstance<py::array>(obj))
    fail<py::type_error>(fn, name, " must be a NumPy array (it is updated in place)");
  auto arr = py::reinterpret_borrow<py::array>(obj);
  if (!arr.dtype().is(stat_dtype(dt))) {
    fail<py::type_error>(fn, name, " has dtype ", dtype_str(arr.dtype()), "; expected ", dtype_str(stat_dtype(dt)));
  }
  if (arr.ndim() != 1 || arr.shape(0) != n) {
    fail<py::value_error>(fn, name, " has shape ", shape_str(arr), "; expected (", n, ",)");
  }
  if (!(arr.flags() & py::array::c_style))
    fail<py::value_error>(fn, name, " must be contiguous (it is updated in place)");
  if (!arr.writeable()) fail<py::value_error>(fn, name, " is read-only (it is updated in place)");
  return arr;
}

std::span<const uint8_t> mask_arg(const py::object& obj, const char* fn, int64_t n, py::array& keep) {
  if (obj.is_none()) return {};
  auto arr = contiguous(obj, fn, "mask");
  const auto t = arr.dtype();
  if (t.itemsize() != 1 || (t.kind() != 'b' && t.kind() != 'u')) {
    fail<py::type_error>(fn, "mask has dtype ", dtype_str(t), "; expected bool or uint8");
  }
  if (arr.size() != n) fail<py::value_error>(fn, "mask has shape ", shape_str(arr), "; expected ", n, " rows");
  keep = arr;
  return {static_cast<const uint8_t*>(arr.data()), static_cast<size_t>(arr.size())};
}

py::array out_arg(const py::object& out, const char* fn, const Data& like, std::initializer_list<Input> inputs,
                  const char* name) {
  if (out.is_none()) return new_array(like.dt, like.shape());
  if (!py::isinstance<py::array>(out)) fail<py::type_error>(fn, name, " must be a NumPy array");
  auto arr = py::reinterpret_borrow<py::array>(out);
  Dt dt = Dt::f32;
  if (!dt_of(arr.dtype(), dt) || dt != like.dt) {
    fail<py::type_error>(fn, name, " has dtype ", dtype_str(arr.dtype()), "; expected ", dt_name(like.dt));
  }
  if (std::vector<py::ssize_t>(arr.shape(), arr.shape() + arr.ndim()) != like.shape()) {
    fail<py::value_error>(fn, name, " has shape ", shape_str(arr), "; expected ", shape_str(like.arr));
  }
  if (!(arr.flags() & py::array::c_style)) fail<py::value_error>(fn, name, " must be C-contiguous");
  if (!arr.writeable()) fail<py::value_error>(fn, name, " is read-only");
  const auto* begin = static_cast<const char*>(arr.data());
  const auto* end = begin + arr.nbytes();
  for (const Input& in : inputs) {
    if (in.data == nullptr || !in.data->present || in.data->arr.nbytes() == 0) continue;
    const auto* b = static_cast<const char*>(in.data->arr.data());
    const auto* e = b + in.data->arr.nbytes();
    if (end <= b || e <= begin) continue;  // disjoint
    if (in.may_be && b == begin && e == end) continue;
    fail<py::value_error>(fn, name, " overlaps ", in.name,
                          in.may_be ? " without being it (an output may be that input's own memory, not part of it)"
                                    : " (this output must not share memory with it)");
  }
  return arr;
}

std::pair<py::array, py::array> out_pair(const py::object& out, const char* fn, const Data& like0,
                                         std::initializer_list<Input> inputs0, const Data& like1,
                                         std::initializer_list<Input> inputs1) {
  if (out.is_none()) return {new_array(like0.dt, like0.shape()), new_array(like1.dt, like1.shape())};
  if (!py::isinstance<py::tuple>(out) || py::len(out) != 2) {
    fail<py::type_error>(fn, "out must be a tuple of two arrays");
  }
  const auto pair = py::reinterpret_borrow<py::tuple>(out);
  py::array a = out_arg(pair[0], fn, like0, inputs0, "out[0]");
  py::array b = out_arg(pair[1], fn, like1, inputs1, "out[1]");
  const auto* a0 = static_cast<const char*>(a.data());
  const auto* b0 = static_cast<const char*>(b.data());
  if (a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes()) {
    fail<py::value_error>(fn, "out[0] and out[1] share memory");
  }
  return {a, b};
}

void value_error(const char* fn, const std::string& what) { fail<py::value_error>(fn, what); }

void type_error(const char* fn, const std::string& what) { fail<py::type_error>(fn, what); }

py::array new_array(Dt dt, const std::vector<py::ssize_t>& shape) { return py::array(numpy_dtype(dt), shape); }

py::array new_stats(Dt dt, const std::vector<py::ssize_t>& shape) { return py::array(stat_dtype(dt), shape); }

py::array new_zeros(Dt dt, int64_t d) {
  py::array a(numpy_dtype(dt), std::vector<py::ssize_t>{static_cast<py::ssize_t>(d)});
  if (d > 0) std::fill_n(static_cast<char*>(a.mutable_data()), a.nbytes(), char{0});
  return a;
}

}  // namespace addnorm::py_bind
