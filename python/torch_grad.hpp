// addnorm.torch's backward as differentiable torch ops, for double backward (create_graph=True):
// the C++ backend's copy of python/addnorm/_torch_grad.py, the same ops in the same order, so both
// backends give the same bits (see that file for what and why). Each returns the gradients in the
// inputs' dtypes, undefined where not needed.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <vector>

#include "addnorm/norm/dropout.hpp"

namespace addnorm::torch_ops {

// The statistics' dtype for data of dtype st, which is also the math's (stat_t, compute_t):
// float64 for float64, else float32.
inline at::ScalarType stat_type(at::ScalarType st) {
  return st == at::ScalarType::Double ? at::ScalarType::Double : at::ScalarType::Float;
}

namespace grad2 {

using Grads = std::vector<at::Tensor>;

// LayerNorm's (layer) or RMSNorm's double backward, for a third derivative: (gdy, gx, gweight), the
// gradients of <ddx, dx> + <ddw, dweight> + <ddb, dbias> (each undefined: zero) with respect to the
// first-order backward's inputs; need = {dy, x, weight}. weight may be undefined.
Grads norm_double(const at::Tensor& ddx, const at::Tensor& ddw, const at::Tensor& ddb, const at::Tensor& dy,
                  const at::Tensor& x, const at::Tensor& weight, double eps, bool layer, std::array<bool, 3> need);

// The branch's scales of add_norm (each undefined: ones): layer (d) and row (the data's leading
// shape), and the forward's f, which LayerScale's gradient reads.
struct BranchTensors {
  at::Tensor layer, row, f;
};

// The factor on f per element in dtype c, (keep / (1 - p)) * row * layer as the kernels form it,
// broadcast against `like`; undefined when all ones.
at::Tensor branch_factor(const at::Tensor& like, at::ScalarType c, const DropoutSpec& dropout, const at::Tensor& layer,
                         const at::Tensor& row);

// s = alpha * h + Dropout(f) * row * layer, y = Norm(s): (dh, df, dweight, dbias, dlayer) from ds and
// dy (either undefined); need = {h, f, weight, bias, layer}.
Grads add_norm(const at::Tensor& ds, const at::Tensor& dy, const at::Tensor& s, const at::Tensor& weight, double eps,
               bool layer, double alpha, const DropoutSpec& dropout, at::ScalarType h_dtype, at::ScalarType f_dtype,
               std::array<bool, 5> need, const BranchTensors& scales = {});

// s = alpha * h + Dropout(f) * row * layer: (dh, df, dlayer) from ds (undefined: zero) and dn, the
// norm's backward from y (NormBackwardFn's dx, or the composite norm's), in s's math dtype;
// need = {h, f, layer}.
Grads add_norm_residual(const at::Tensor& ds, const at::Tensor& dn, const at::Tensor& s, double alpha,
                        const DropoutSpec& dropout, at::ScalarType h_dtype, at::ScalarType f_dtype,
                        std::array<bool, 3> need, const BranchTensors& scales = {});

// s = h + a * Dropout(f): (dh, df, da).
Grads rezero(const at::Tensor& ds, const at::Tensor& f, const at::Tensor& a, const DropoutSpec& dropout,
             std::array<bool, 3> need);

// BatchNorm in training, features last, over the rows that mask (undefined: all) marks: (dx, dweight, dbias).
Grads batch_norm(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight, double eps,
                 const at::Tensor& mask, bool need_x, bool need_w, bool need_b);

}  // namespace grad2

}  // namespace addnorm::torch_ops
