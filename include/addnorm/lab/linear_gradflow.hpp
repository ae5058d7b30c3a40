// The seeds' experiment "Measuring the gradient through a residual stack": a stack of L linear
// layers of size d x d, y = W x (plain) against y = x + W x (residual). A gradient of ones arrives
// at the top and is carried down by each layer's Jacobian transposed:
//
//   plain:     g <- W^T g          (dy/dx = W)
//   residual:  g <- (I + W)^T g    (dy/dx = I + W)
//
// for W = W_{L-1}, ..., W_0 (top to bottom), in double precision, in the seeds' order of
// operations (a matrix-vector product per layer), so that the seeds' NumPy weights give the
// seeds' printed numbers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace addnorm::lab {

struct LinearGradflow {
  int64_t layers = 0, d = 0;
  double plain = 0, residual = 0;  // ||g|| at the bottom (the input of layer 0)
  // ||g|| at the input of layer k for k = 0 .. L-1, then at the top (k = L: ||ones|| = sqrt(d)):
  // L + 1 values, bottom first; profile[0] is plain (residual), profile[L] is sqrt(d).
  std::vector<double> profile_plain, profile_residual;
};

// weights: (L, d, d) row-major, forward order (weights[k] is layer k's W, layer 0 at the bottom),
// as NumPy's np.stack(Ws) stores it. L >= 1, d >= 1, weights.size() == L * d * d.
LinearGradflow linear_gradflow(std::span<const double> weights, int64_t layers, int64_t d);

// addnorm's own seeded weights for linear_gradflow: L * d * d draws of N(0, std^2) from
// nn::init_normal (Philox4x32-10, Box-Muller; element i is a pure function of (stream, i)) on the
// stream nn::mix_seed(seed, run), run = 0, 1, ... the index of the run in a command. Not NumPy's
// PCG64: to reproduce a NumPy run, pass its weights (addnorm gradflow linear --weights).
std::vector<double> linear_gradflow_weights(int64_t layers, int64_t d, double std, uint64_t seed, uint64_t run);

}  // namespace addnorm::lab
