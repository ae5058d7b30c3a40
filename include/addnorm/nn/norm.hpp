// The normalization module of an Add & Norm box, over the kernels of norm/:
//
//   layer:  LayerNorm, weight (gamma) and bias (beta) of d, init 1 and 0
//   rms:    RMSNorm, weight of d, init 1
//   batch:  BatchNorm over the valid rows (row_valid nonzero; padding rows take no part and get
//           y = 0, dx = 0), weight and bias of d, running_mean / running_var for inference
//   scale:  ScaleNorm (Nguyen and Salazar 2019): y = g * x / sqrt(||x||^2 + eps), one scalar g,
//           init sqrt(d); computed as RMSNorm with gamma = g / sqrt(d) and eps / d
//   none:   y = x
// Parameter names follow PyTorch's nn.LayerNorm: weight, bias.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/parameter.hpp"
#include "addnorm/norm/types.hpp"

namespace addnorm::nn {

enum class NormType { layer, rms, batch, scale, none };

// "layer", "rms", "batch", "scale", "none"; throws Error for anything else.
NormType parse_norm_type(std::string_view name);
std::string_view norm_type_name(NormType t);

struct NormConfig {
  NormType type = NormType::layer;
  double eps = 1e-5;       // finite, > 0
  double momentum = 0.1;   // batch: weight of the new batch in the running statistics
};

template <class T>
class Norm {
 public:
  Norm() : Norm(0, {NormType::none, 1e-5, 0.1}) {}
  Norm(int64_t d, const NormConfig& config);

  // y: (rows, d) =    x: (rows, d)    row_valid: (rows) or empty (batch only)
  // training: batch statistics and running updates (batch only; other kinds ignore it).
  void forward(View2D<T> y, View2D<const T> x, std::span<const uint8_t> row_valid, bool training);

  // dx: (rows, d) =    weight.grad, bias.grad +=. x and row_valid are the forward's, which must
  // have been in training mode for batch.
  void backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x, std::span<const uint8_t> row_valid);

  void parameters(ParameterList<T>& list, const std::string& prefix);
  [[nodiscard]] NormType type() const { return config_.type; }
  [[nodiscard]] const NormConfig& config() const { return config_; }

  Parameter<T> weight;  // layer, rms, batch: (d); scale: (1)
  Parameter<T> bias;    // layer, batch: (d)
  std::vector<stat_t<T>> running_mean, running_var;  // batch: (d) each, init 0 and 1

 private:
  NormConfig config_;
  int64_t d_ = 0;
  bool trained_ = false;         // batch: the last forward was in training mode
  std::vector<stat_t<T>> mean_;  // (rows) layer; (d) batch
  std::vector<stat_t<T>> rstd_;  // (rows) layer, rms, scale; (d) batch
  std::vector<T> gvec_;          // scale: (d) filled with g / sqrt(d)
  std::vector<T> dgvec_;         // scale: (d) scratch for the gradient of gvec
};

}  // namespace addnorm::nn
