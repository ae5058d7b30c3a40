// Fused "Add & Norm": the residual add, dropout of the sub-layer output and the normalization in
// one pass over memory, forward and backward. One kernel pair serves every placement:
//
//   s = alpha * h + Dropout(f)        (the new residual stream; alpha = 1 except DeepNorm)
//   y = Norm(s)                       (Norm = LayerNorm or RMSNorm, with gamma, beta)
//
//   pre-norm  (GPT-2):   h' = h + Dropout(f) = s is the residual stream and y feeds the next
//                        sub-layer. Backward gets dy and the gradient arriving on the stream, ds.
//   post-norm (Vaswani): y = Norm(h + Dropout(f)) is the stream; ds is absent.
//   DeepNorm:            y = Norm(alpha * h + f), alpha > 0 given.
//
// Dropout element i (row-major index r * d + c within this call) is kept when
// philox_bits(seed, offset + i) >= round(p * 2^32); kept values are scaled by 1 / (1 - p). The
// backward regenerates the mask; nothing is stored. p = 0 is exactly s = alpha * h + f.
//
// Element types (T): float, double, bf16, f16. The residual stream (h, s, and their gradients
// dh, ds) has type R = T, or R = float for bf16/f16 data (a 16-bit model with an f32 residual
// stream, so that the repeated adds of a deep stack do not round to 8 bits each time).
//
// Branch scales (optional; BranchScale): the kept values of f may also be scaled per channel and
// per row, as flash-attn's dropout_add_layer_norm does (its colscale and rowscale):
//
//   s = alpha * h + Dropout(f) * row[r] * layer[c]
//
//   layer (d):  LayerScale (Touvron et al. 2021, CaiT; DINOv2), a learnable per-channel scale of
//               the branch, started small (1e-5 .. 0.1); add_norm_backward returns its gradient.
//   row (rows): drop path / stochastic depth per sample (0 for a dropped row, 1 / (1 - p_path)
//               for a kept one), made by the caller; no gradient.
//
// Each element's factor on f, (keep / (1 - p)) * row[r] * layer[c], is formed in the compute type
// (f32, f64 for f64) and applied to f in the same fused multiply-add as dropout alone.
//
// Shapes: h, f, s, y, dy, ds, dh, df are (rows, d) strided views; gamma, beta, dgamma, dbeta (d);
// mean, rstd (rows). Empty span = absent, as in layer_norm.hpp. rows = 0 is a no-op.
#pragma once

#include <span>

#include "addnorm/core/view.hpp"
#include "addnorm/norm/dropout.hpp"
#include "addnorm/norm/types.hpp"

namespace addnorm {

enum class NormKind { layer, rms };

struct AddNormOptions {
  NormKind kind = NormKind::layer;
  double eps = 1e-5;    // finite, > 0
  double alpha = 1.0;   // finite; scales the residual h (DeepNorm's alpha)
  DropoutSpec dropout;  // applied to f
};

// The branch's scales (see above); an empty span is a scale of ones. Values of T, the data's type.
template <class T>
struct BranchScale {
  std::span<const T> layer;  // (d): LayerScale
  std::span<const T> row;    // (rows): drop path
};

// Forward. Overwrites (=) s, y, mean (layer only; absent for rms), rstd. s is required: it is the
// residual stream for pre-norm and the saved input of the norm for backward. s may alias h.
template <class T, class R = T>
void add_norm_forward(View2D<R> s, View2D<T> y, std::span<stat_t<T>> mean, std::span<stat_t<T>> rstd, View2D<const R> h,
                      View2D<const T> f, std::span<const T> gamma, std::span<const T> beta,
                      const AddNormOptions& options, const BranchScale<T>& scale = {});

// Backward. With ds_total = ds + dNorm/ds(dy) (ds absent = 0):
//   dh = alpha * ds_total          df = ds_total * mask / (1 - p) * row[r] * layer[c]
// dh and df are overwritten (=); dgamma and dbeta accumulate (+=), deterministic for any thread
// count. s, mean, rstd are those of the forward; options and scale must be the forward's.
//
// dlayer (d, optional) accumulates (+=) LayerScale's gradient,
//   dlayer[c] += sum_r ds_total * mask / (1 - p) * row[r] * f[r, c],
// deterministic for any thread count; it needs the forward's f (same shape as s) and scale.layer.
// Without dlayer, f is not read and may be empty. With it, df is (ds_total * mask / (1 - p) *
// row[r]) rounded to T, times layer[c]: one rounding of T more than without.
template <class T, class R = T>
void add_norm_backward(View2D<R> dh, View2D<T> df, std::span<T> dgamma, std::span<T> dbeta, View2D<const T> dy,
                       View2D<const R> ds, View2D<const R> s, std::span<const stat_t<T>> mean,
                       std::span<const stat_t<T>> rstd, std::span<const T> gamma, const AddNormOptions& options,
                       const BranchScale<T>& scale = {}, std::span<T> dlayer = {}, View2D<const T> f = {});

// ReZero (Bachlechner et al. 2020): s = h + a * Dropout(f), a learnable scalar, no norm.
// Overwrites s (may alias h).
template <class T>
void rezero_forward(View2D<T> s, View2D<const T> h, View2D<const T> f, double a, const DropoutSpec& dropout);

// ReZero backward: dh = ds (=), df = a * Dropout'(ds) (=), da += sum(ds * Dropout(f)) (deterministic).
template <class T>
void rezero_backward(View2D<T> dh, View2D<T> df, double& da, View2D<const T> ds, View2D<const T> f, double a,
                     const DropoutSpec& dropout);

}  // namespace addnorm
