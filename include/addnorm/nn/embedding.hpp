// Token embeddings and positional encodings, forward and backward.
//
// Rows are token-major within a batch: row b * T + t holds token t of sequence b.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/parameter.hpp"

namespace addnorm::nn {

// Embedding table weight (vocab, d); init N(0, 1) as PyTorch's nn.Embedding.
template <class T>
class Embedding {
 public:
  Embedding() = default;
  Embedding(int64_t vocab, int64_t d, uint64_t seed);

  // y: (rows, d) =    ids: (rows), each in [0, vocab)
  //   y_r = scale * W[ids_r]     (scale = sqrt(d) in Vaswani et al.; 1 in GPT-2)
  void forward(View2D<T> y, std::span<const int64_t> ids, double scale = 1.0) const;

  // weight.grad +=: dW[ids_r] += scale * dy_r, rows in order (deterministic).
  void backward(View2D<const T> dy, std::span<const int64_t> ids, double scale = 1.0);

  void parameters(ParameterList<T>& list, const std::string& prefix);

  Parameter<T> weight;  // (vocab, d)
};

// Sinusoidal encoding (Vaswani et al. 2017), added in place: for row r, position
// pos = offset + r % seq_len,
//   y[r, 2i] += sin(pos / 10000^(2i / d))    y[r, 2i + 1] += cos(pos / 10000^(2i / d))
// No parameters; its backward is the identity (the gradient passes through unchanged).
template <class T>
void add_sinusoidal_positions(View2D<T> y, int64_t seq_len, int64_t offset = 0);

// Learned positions (GPT-2's wpe): weight (max_len, d).
template <class T>
class LearnedPositions {
 public:
  LearnedPositions() = default;
  LearnedPositions(int64_t max_len, int64_t d, uint64_t seed);  // N(0, 1), as nn.Embedding

  // y: (B*T, d) +=: y[b*T + t] += W[offset + t];  offset + T <= max_len.
  void forward(View2D<T> y, int64_t seq_len, int64_t offset = 0) const;
  // weight.grad +=: dW[offset + t] += sum_b dy[b*T + t], b ascending (deterministic).
  void backward(View2D<const T> dy, int64_t seq_len, int64_t offset = 0);

  void parameters(ParameterList<T>& list, const std::string& prefix);

  Parameter<T> weight;  // (max_len, d)
};

}  // namespace addnorm::nn
