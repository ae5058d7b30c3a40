// addnorm._addnorm: the Python extension module (python/README.md). The kernels' groups are bound
// in norm_bindings.cpp, add_norm_bindings.cpp and double_backward_bindings.cpp; threads, SIMD
// targets and the version here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "addnorm/core/parallel.hpp"
#include "addnorm/core/version.hpp"
#include "addnorm/norm/simd.hpp"
#include "bindings.hpp"

PYBIND11_MODULE(_addnorm, m) {
  namespace py = pybind11;
  m.doc() =
      "addnorm's normalization kernels (LayerNorm, RMSNorm, BatchNorm, fused add + dropout + norm) "
      "on NumPy arrays; see python/README.md";
  m.attr("__version__") = addnorm::version_string;
  addnorm::py_bind::bind_norms(m);
  addnorm::py_bind::bind_add_norms(m);
  addnorm::py_bind::bind_double_backward(m);
  m.def("num_threads", &addnorm::num_threads, "The number of threads the kernels may use.");
  m.def("set_num_threads", &addnorm::set_num_threads, py::arg("n"), "Sets the number of threads the kernels may use.");
  m.def("simd_target", &addnorm::simd_target, "The SIMD target the kernels run.");
  m.def(
      "set_simd_target", [](const std::string& name) { addnorm::set_simd_target(name); }, py::arg("name"),
      "Runs the kernels on this SIMD target from now on (one of supported_simd_targets()).");
  m.def("supported_simd_targets", &addnorm::supported_simd_targets, "The SIMD targets this CPU runs, best first.");
}
