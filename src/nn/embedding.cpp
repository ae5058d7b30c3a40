// Token embeddings, sinusoidal and learned positions. See include/addnorm/nn/embedding.hpp.
#include "addnorm/nn/embedding.hpp"

#include <cmath>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/init.hpp"

namespace addnorm::nn {

template <class T>
Embedding<T>::Embedding(int64_t vocab, int64_t d, uint64_t seed) : weight("weight", {vocab, d}) {
  require(vocab > 0 && d > 0, "Embedding", "vocab and d must be > 0, got ", vocab, " and ", d);
  init_normal<T>(weight.value, 0.0, 1.0, seed);
}

// y: (rows, d) =    ids: (rows)
template <class T>
void Embedding<T>::forward(View2D<T> y, std::span<const int64_t> ids, double scale) const {
  constexpr const char* fn = "Embedding::forward";
  const int64_t vocab = weight.shape[0], d = weight.shape[1];
  require(y.cols() == d && y.rows() == static_cast<int64_t>(ids.size()), fn, "y is ", y.rows(), " x ", y.cols(),
          ", expected ", ids.size(), " x ", d);
  const auto s = static_cast<T>(scale);
  for (int64_t r = 0; r < y.rows(); ++r) {
    const int64_t id = ids[static_cast<size_t>(r)];
    require(id >= 0 && id < vocab, fn, "token id ", id, " at row ", r, " is outside [0, ", vocab, ")");
    const T* w = weight.value.data() + id * d;
    T* yr = y.row(r);
    for (int64_t c = 0; c < d; ++c) yr[c] = s * w[c];
  }
}

// weight.grad +=
//   y_r = scale * W[ids_r]  =>  dW[v] = scale * sum_{r: ids_r = v} dy_r
template <class T>
void Embedding<T>::backward(View2D<const T> dy, std::span<const int64_t> ids, double scale) {
  constexpr const char* fn = "Embedding::backward";
  const int64_t vocab = weight.shape[0], d = weight.shape[1];
  require(dy.cols() == d && dy.rows() == static_cast<int64_t>(ids.size()), fn, "dy is ", dy.rows(), " x ",
          dy.cols(), ", expected ", ids.size(), " x ", d);
  const auto s = static_cast<T>(scale);
  for (int64_t r = 0; r < dy.rows(); ++r) {
    const int64_t id = ids[static_cast<size_t>(r)];
    require(id >= 0 && id < vocab, fn, "token id ", id, " at row ", r, " is outside [0, ", vocab, ")");
    T* g = weight.grad.data() + id * d;
    const T* dyr = dy.row(r);
    for (int64_t c = 0; c < d; ++c) g[c] += s * dyr[c];
  }
}

template <class T>
void Embedding<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  add_parameter(list, prefix, weight);
}

// y: (rows, d) +=
template <class T>
void add_sinusoidal_positions(View2D<T> y, int64_t seq_len, int64_t offset) {
  constexpr const char* fn = "add_sinusoidal_positions";
  require(seq_len > 0 && y.rows() % seq_len == 0, fn, "rows ", y.rows(), " are not a multiple of seq_len ", seq_len);
  require(offset >= 0, fn, "offset must be >= 0, got ", offset);
  const int64_t d = y.cols();
  for (int64_t r = 0; r < y.rows(); ++r) {
    const auto pos = static_cast<double>(offset + r % seq_len);
    T* yr = y.row(r);
    for (int64_t c = 0; c < d; ++c) {
      const int64_t i2 = c - c % 2;  // 2i
      const double angle = pos / std::pow(10000.0, static_cast<double>(i2) / static_cast<double>(d));
      yr[c] += static_cast<T>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
}

template <class T>
LearnedPositions<T>::LearnedPositions(int64_t max_len, int64_t d, uint64_t seed) : weight("weight", {max_len, d}) {
  require(max_len > 0 && d > 0, "LearnedPositions", "max_len and d must be > 0, got ", max_len, " and ", d);
  init_normal<T>(weight.value, 0.0, 1.0, seed);
}

namespace {
void check_positions(int64_t rows, int64_t cols, int64_t seq_len, int64_t offset, int64_t max_len, int64_t d,
                     const char* fn) {
  require(cols == d, fn, "the view has ", cols, " columns, expected ", d);
  require(seq_len > 0 && rows % seq_len == 0, fn, "rows ", rows, " are not a multiple of seq_len ", seq_len);
  require(offset >= 0 && offset + seq_len <= max_len, fn, "positions ", offset, " .. ", offset + seq_len - 1,
          " exceed max_len ", max_len);
}
}  // namespace

// y: (B*T, d) +=
template <class T>
void LearnedPositions<T>::forward(View2D<T> y, int64_t seq_len, int64_t offset) const {
  const int64_t max_len = weight.shape[0], d = weight.shape[1];
  check_positions(y.rows(), y.cols(), seq_len, offset, max_len, d, "LearnedPositions::forward");
  for (int64_t r = 0; r < y.rows(); ++r) {
    const T* w = weight.value.data() + (offset + r % seq_len) * d;
    T* yr = y.row(r);
    for (int64_t c = 0; c < d; ++c) yr[c] += w[c];
  }
}

// weight.grad +=:  y_{bT+t} += W[offset + t]  =>  dW[offset + t] += sum_b dy_{bT+t}
template <class T>
void LearnedPositions<T>::backward(View2D<const T> dy, int64_t seq_len, int64_t offset) {
  const int64_t max_len = weight.shape[0], d = weight.shape[1];
  check_positions(dy.rows(), dy.cols(), seq_len, offset, max_len, d, "LearnedPositions::backward");
  for (int64_t r = 0; r < dy.rows(); ++r) {
    T* g = weight.grad.data() + (offset + r % seq_len) * d;
    const T* dyr = dy.row(r);
    for (int64_t c = 0; c < d; ++c) g[c] += dyr[c];
  }
}

template <class T>
void LearnedPositions<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  add_parameter(list, prefix, weight);
}

template class Embedding<float>;
template class Embedding<double>;
template class LearnedPositions<float>;
template class LearnedPositions<double>;
template void add_sinusoidal_positions<float>(View2D<float>, int64_t, int64_t);
template void add_sinusoidal_positions<double>(View2D<double>, int64_t, int64_t);

}  // namespace addnorm::nn
