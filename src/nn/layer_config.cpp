// DeepNet's constants. See include/addnorm/nn/layer_config.hpp.
#include "addnorm/nn/layer_config.hpp"

#include <cmath>

#include "addnorm/core/error.hpp"

namespace addnorm::nn {

DeepNormConstants deepnorm_constants(StackKind kind, int64_t encoder_layers, int64_t decoder_layers) {
  constexpr const char* fn = "deepnorm_constants";
  const auto n = static_cast<double>(encoder_layers), m = static_cast<double>(decoder_layers);
  switch (kind) {
    case StackKind::encoder_only:
      require(encoder_layers > 0, fn, "encoder_layers must be > 0");
      return {std::pow(2 * n, 0.25), std::pow(8 * n, -0.25)};
    case StackKind::decoder_only:
      require(decoder_layers > 0, fn, "decoder_layers must be > 0");
      return {std::pow(2 * m, 0.25), std::pow(8 * m, -0.25)};
    case StackKind::encoder_of_encdec:
      require(encoder_layers > 0 && decoder_layers > 0, fn, "both layer counts must be > 0");
      return {0.81 * std::pow(n * n * n * n * m, 1.0 / 16), 0.87 * std::pow(n * n * n * n * m, -1.0 / 16)};
    case StackKind::decoder_of_encdec:
      require(encoder_layers > 0 && decoder_layers > 0, fn, "both layer counts must be > 0");
      return {std::pow(3 * m, 0.25), std::pow(12 * m, -0.25)};
  }
  fail(fn, "unknown stack kind");
}

}  // namespace addnorm::nn
