// The seeds' residual-stack gradient experiment. See include/addnorm/lab/linear_gradflow.hpp.
#include "addnorm/lab/linear_gradflow.hpp"

#include <cmath>
#include <limits>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/init.hpp"

namespace addnorm::lab {
namespace {

// ||g||_2 as np.linalg.norm computes it for a 1-D float64 vector: sqrt(dot(g, g)).
double norm2(const std::vector<double>& g) {
  double s = 0;
  for (const double v : g) s += v * v;
  return std::sqrt(s);
}

// out = M^T g, M: (d, d) row-major, with the identity added to M when residual.
//   out_j = sum_i (M_ij + [i == j]) g_i
void transpose_times(std::vector<double>& out, const double* m, const std::vector<double>& g, int64_t d,
                     bool residual) {
  for (int64_t j = 0; j < d; ++j) {
    double s = 0;
    for (int64_t i = 0; i < d; ++i) s += (m[i * d + j] + (residual && i == j ? 1.0 : 0.0)) * g[static_cast<size_t>(i)];
    out[static_cast<size_t>(j)] = s;
  }
}

}  // namespace

LinearGradflow linear_gradflow(std::span<const double> weights, int64_t layers, int64_t d) {
  constexpr const char* fn = "linear_gradflow";
  require(layers >= 1, fn, "layers must be >= 1, got ", layers);
  require(d >= 1, fn, "d must be >= 1, got ", d);
  require(layers <= std::numeric_limits<int64_t>::max() / d / d, fn, "layers * d * d overflows");
  require(static_cast<int64_t>(weights.size()) == layers * d * d, fn, "weights have ", weights.size(),
          " values, expected layers * d * d = ", layers * d * d);
  LinearGradflow r;
  r.layers = layers;
  r.d = d;
  const auto n = static_cast<size_t>(layers);
  r.profile_plain.assign(n + 1, 0.0);
  r.profile_residual.assign(n + 1, 0.0);
  std::vector<double> gp(static_cast<size_t>(d), 1.0), gr = gp, t(gp.size());
  r.profile_plain[n] = r.profile_residual[n] = norm2(gp);
  for (int64_t k = layers - 1; k >= 0; --k) {
    const double* w = weights.data() + k * d * d;
    transpose_times(t, w, gp, d, false);
    gp.swap(t);
    transpose_times(t, w, gr, d, true);
    gr.swap(t);
    r.profile_plain[static_cast<size_t>(k)] = norm2(gp);
    r.profile_residual[static_cast<size_t>(k)] = norm2(gr);
  }
  r.plain = r.profile_plain[0];
  r.residual = r.profile_residual[0];
  return r;
}

std::vector<double> linear_gradflow_weights(int64_t layers, int64_t d, double std, uint64_t seed, uint64_t run) {
  constexpr const char* fn = "linear_gradflow_weights";
  require(layers >= 1, fn, "layers must be >= 1, got ", layers);
  require(d >= 1, fn, "d must be >= 1, got ", d);
  require(std::isfinite(std) && std >= 0, fn, "std must be finite and >= 0, got ", std);
  require(layers <= std::numeric_limits<int64_t>::max() / d / d, fn, "layers * d * d overflows");
  std::vector<double> w(static_cast<size_t>(layers * d * d));
  nn::init_normal<double>(w, 0.0, std, nn::mix_seed(seed, run));
  return w;
}

}  // namespace addnorm::lab
