// Element and statistics types of the normalization kernels.
#pragma once

#include <type_traits>

#include "addnorm/core/dtype.hpp"

namespace addnorm {

// Element types: float, double, bf16 and f16 (16-bit storage, float arithmetic).
// Statistics (mean, rstd, running mean/var) are kept in f32 for f32, bf16 and f16 data
// and in f64 for f64 data.
template <class T>
struct StatType {
  using type = float;
};
template <>
struct StatType<double> {
  using type = double;
};
template <class T>
using stat_t = typename StatType<T>::type;

// Arithmetic inside a kernel: f32 for f32/bf16/f16 data, f64 for f64 data.
template <class T>
using compute_t = stat_t<T>;

}  // namespace addnorm
