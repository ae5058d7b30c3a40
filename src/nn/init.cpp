// Initializers from Philox draws. See include/addnorm/nn/init.hpp.
#include "addnorm/nn/init.hpp"

#include <cmath>
#include <numbers>

#include "addnorm/core/error.hpp"
#include "addnorm/core/philox.hpp"

namespace addnorm::nn {
namespace {

// A uniform double in (0, 1) from 32 bits: (bits + 0.5) / 2^32.
double unit(uint64_t seed, uint64_t index) {
  return (static_cast<double>(philox_bits(seed, index)) + 0.5) / 4294967296.0;
}

template <class T>
void fan_in_out(const Parameter<T>& p, const char* fn, double& fan_in, double& fan_out) {
  require(p.shape.size() == 2, fn, p.name, " must be 2-D, it has ", p.shape.size(), " dimensions");
  fan_out = static_cast<double>(p.shape[0]);
  fan_in = static_cast<double>(p.shape[1]);
  require(fan_in + fan_out > 0, fn, p.name, " is empty");
}

}  // namespace

uint64_t mix_seed(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <class T>
void init_uniform(std::span<T> x, double lo, double hi, uint64_t seed) {
  require(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "init_uniform", "bad range [", lo, ", ", hi, "]");
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(lo + (hi - lo) * unit(seed, i));
}

template <class T>
void init_normal(std::span<T> x, double mean, double std, uint64_t seed) {
  require(std::isfinite(mean) && std::isfinite(std) && std >= 0, "init_normal", "bad mean ", mean, " or std ", std);
  for (size_t i = 0; i < x.size(); ++i) {
    // Box-Muller on draws 2i and 2i + 1.
    const double u1 = unit(seed, 2 * i), u2 = unit(seed, 2 * i + 1);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    x[i] = static_cast<T>(mean + std * z);
  }
}

template <class T>
void xavier_uniform(Parameter<T>& p, double gain, uint64_t seed) {
  double fi = 0, fo = 0;
  fan_in_out(p, "xavier_uniform", fi, fo);
  const double l = gain * std::sqrt(6.0 / (fi + fo));
  init_uniform<T>(p.value, -l, l, seed);
}

template <class T>
void xavier_normal(Parameter<T>& p, double gain, uint64_t seed) {
  double fi = 0, fo = 0;
  fan_in_out(p, "xavier_normal", fi, fo);
  init_normal<T>(p.value, 0.0, gain * std::sqrt(2.0 / (fi + fo)), seed);
}

#define ADDNORM_INSTANTIATE(T)                                                 \
  template void init_uniform<T>(std::span<T>, double, double, uint64_t);      \
  template void init_normal<T>(std::span<T>, double, double, uint64_t);       \
  template void xavier_uniform<T>(Parameter<T>&, double, uint64_t);           \
  template void xavier_normal<T>(Parameter<T>&, double, uint64_t);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm::nn
