// The groups of functions of the Python module (module.cpp calls each once).
#pragma once

#include <pybind11/pybind11.h>

namespace addnorm::py_bind {

void bind_norms(pybind11::module_& m);            // norm_bindings.cpp: LayerNorm, RMSNorm, BatchNorm
void bind_add_norms(pybind11::module_& m);        // add_norm_bindings.cpp: fused add + norm, ReZero, dropout
void bind_double_backward(pybind11::module_& m);  // double_backward_bindings.cpp: LayerNorm, RMSNorm

}  // namespace addnorm::py_bind
