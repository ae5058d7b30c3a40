// Configuration shared by the encoder and decoder layers and their stacks.
#pragma once

#include <cstdint>

#include "addnorm/nn/activation.hpp"
#include "addnorm/nn/norm.hpp"
#include "addnorm/nn/residual.hpp"
#include "addnorm/norm/dropout.hpp"

namespace addnorm::nn {

struct LayerConfig {
  int64_t d_model = 512;
  int64_t heads = 8;
  int64_t d_ff = 2048;
  Activation activation = Activation::relu;
  Placement placement = Placement::post;
  NormConfig norm;            // type and eps of every norm of the layer
  bool residual = true;       // false: no residual connections (the seeds' question)
  double alpha = 1.0;         // deepnorm's residual scale (see deepnorm_constants)
  double dropout = 0.1;       // on sub-layer outputs and on the FFN activation
  double attn_dropout = 0.1;  // on attention probabilities
  bool bias = true;           // biases of the attention and FFN projections
  bool fused = true;          // fused add_norm / rezero kernels where they apply

  [[nodiscard]] ResidualConfig residual_config() const {
    return {placement, norm, residual, placement == Placement::deepnorm ? alpha : 1.0, fused};
  }
};

// A LayerConfig with the given sizes, activation and placement, the other fields at their defaults.
inline LayerConfig make_layer_config(int64_t d_model, int64_t heads, int64_t d_ff, Activation activation,
                                     Placement placement) {
  LayerConfig c;
  c.d_model = d_model;
  c.heads = heads;
  c.d_ff = d_ff;
  c.activation = activation;
  c.placement = placement;
  return c;
}

// Training or inference, and the dropout stream of this step. Dropout is off when not training;
// each layer draws its own sub-streams from seed.
struct Mode {
  bool training = true;
  uint64_t seed = 0;
  // The DropoutSpec of dropout site `site` of layer `layer`.
  [[nodiscard]] DropoutSpec dropout(double p, uint64_t layer, uint64_t site) const {
    return training ? DropoutSpec{p, seed, (layer << 48) | (site << 40)} : DropoutSpec{0.0, 0, 0};
  }
};

// DeepNet (Wang et al. 2022), table 1: residual scale alpha and init gain beta.
//   encoder-only or decoder-only of N layers:  alpha = (2N)^(1/4),  beta = (8N)^(-1/4)
//   encoder-decoder, N encoder and M decoder layers:
//     encoder: alpha = 0.81 (N^4 M)^(1/16),  beta = 0.87 (N^4 M)^(-1/16)
//     decoder: alpha = (3M)^(1/4),           beta = (12M)^(-1/4)
struct DeepNormConstants {
  double alpha = 1.0, beta = 1.0;
};
enum class StackKind { encoder_only, decoder_only, encoder_of_encdec, decoder_of_encdec };
DeepNormConstants deepnorm_constants(StackKind kind, int64_t encoder_layers, int64_t decoder_layers);

}  // namespace addnorm::nn
