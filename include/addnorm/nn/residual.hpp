// One Add & Norm box: the residual connection, the dropout of the sub-layer output and the
// normalization(s) around one sub-layer F, for every placement of design.md:
//
//   post       x' = Norm(x + Dropout(F(x)))                     (Vaswani et al. 2017)
//   pre        x' = x + Dropout(F(Norm(x)))                     (GPT-2; the stack adds a final norm)
//   sandwich   x' = x + Dropout(Norm_out(F(Norm(x))))           (the stack adds a final norm)
//   deepnorm   x' = Norm(alpha * x + Dropout(F(x)))             (DeepNet 2022)
//   rezero     x' = x + a * Dropout(F(x)), a learnable scalar per box, 0 at init; no norm
//   none       x' = Dropout(F(x)): no residual, no norm (the control)
// residual = false drops the "x +" (alpha * x) term from any placement.
//
// A sub-layer is run by its layer in three steps: u = input(x); f = F(u); output(x', x, f). The
// backward goes the other way: backward_output gives dx (=) and df (=), the layer runs F's
// backward to get du, and backward_input adds the gradient through the pre-norm to dx (+=).
// post and deepnorm with layer or rms norm and the residual on run the fused kernel
// add_norm_forward/backward; rezero with the residual on runs rezero_forward/backward; the other
// combinations compose the norm kernels.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/norm.hpp"
#include "addnorm/nn/parameter.hpp"
#include "addnorm/norm/dropout.hpp"

namespace addnorm::nn {

enum class Placement { post, pre, sandwich, deepnorm, rezero, none };

// "post", "pre", "sandwich" (also "peri"), "deepnorm", "rezero", "none".
Placement parse_placement(std::string_view name);
std::string_view placement_name(Placement p);

// Whether a stack of this placement ends with a final norm (pre and sandwich).
constexpr bool needs_final_norm(Placement p) { return p == Placement::pre || p == Placement::sandwich; }

struct ResidualConfig {
  Placement placement = Placement::post;
  NormConfig norm;        // ignored by rezero and none
  bool residual = true;   // false: no "x +" term
  double alpha = 1.0;     // deepnorm's residual scale (1 for the others)
  bool fused = true;      // use the fused add_norm / rezero kernels where they apply
};

template <class T>
class AddNorm {
 public:
  AddNorm() = default;
  AddNorm(int64_t d, const ResidualConfig& config);

  // The sub-layer's input u: (rows, d), Norm(x) for pre and sandwich (held in a buffer of this
  // box), else x itself.
  View2D<const T> input(View2D<const T> x, std::span<const uint8_t> row_valid, bool training);

  // The u that the last input(x) returned (for the sub-layer's backward).
  [[nodiscard]] View2D<const T> saved_input(View2D<const T> x) const;

  // out: (rows, d) =    x, f: (rows, d). x and f must stay unchanged until backward.
  void output(View2D<T> out, View2D<const T> x, View2D<const T> f, std::span<const uint8_t> row_valid,
              const DropoutSpec& dropout, bool training);

  // dx: (rows, d) =    df: (rows, d) =    parameter grads +=    from dout: (rows, d)
  void backward_output(View2D<T> dx, View2D<T> df, View2D<const T> dout, View2D<const T> x, View2D<const T> f,
                       std::span<const uint8_t> row_valid);

  // dx: (rows, d) +=    from du: (rows, d), the gradient at the sub-layer's input
  void backward_input(View2D<T> dx, View2D<const T> du, View2D<const T> x, std::span<const uint8_t> row_valid);

  // Names: prefix + "norm" + index + ".weight", "norm" + index + "_out.weight" (sandwich),
  // "rezero" + index (rezero), e.g. norm1.weight as in PyTorch's Transformer layers.
  void parameters(ParameterList<T>& list, const std::string& prefix, int index);

  [[nodiscard]] const ResidualConfig& config() const { return config_; }
  [[nodiscard]] bool norm_before() const;  // pre, sandwich
  [[nodiscard]] bool norm_after() const;   // post, deepnorm

  Norm<T> norm;      // pre, sandwich: before F; post, deepnorm: after the add
  Norm<T> norm_out;  // sandwich: after F
  Parameter<T> rezero;  // rezero: (1), 0 at init

 private:
  [[nodiscard]] bool fused_add_norm() const;
  [[nodiscard]] bool fused_rezero() const;

  ResidualConfig config_;
  int64_t d_ = 0, rows_ = 0;
  DropoutSpec dropout_;
  std::vector<T> u_;     // (rows, d) Norm(x) for pre and sandwich
  std::vector<T> g_;     // (rows, d) Norm_out(f) for sandwich
  std::vector<T> s_;     // (rows, d) alpha * x + Dropout(f), the norm's input for post and deepnorm
  std::vector<stat_t<T>> mean_, rstd_;  // (rows) fused add_norm statistics
  std::vector<T> ds_;    // (rows, d) gradient scratch
  std::vector<T> dg_;    // (rows, d) gradient scratch
};

}  // namespace addnorm::nn
