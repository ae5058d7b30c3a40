// Initializers. Random numbers come from Philox (core/philox.hpp): element i of a tensor filled
// with seed s is a pure function of (s, i), so an initialization is reproducible for any thread
// count and does not depend on the order in which modules are built.
//
//   uniform(a, b):          U(a, b)
//   normal(mean, std):      N(mean, std^2) by Box-Muller on two 32-bit draws
//   xavier_uniform(gain):   U(-l, l), l = gain * sqrt(6 / (fan_in + fan_out))   (Glorot 2010)
//   xavier_normal(gain):    N(0, (gain * sqrt(2 / (fan_in + fan_out)))^2)
// fan_in and fan_out of a (out, in) weight are in and out.
#pragma once

#include <cstdint>
#include <span>

#include "addnorm/nn/parameter.hpp"

namespace addnorm::nn {

// A seed for a sub-stream: a 64-bit mix (splitmix64) of a parent seed and an index.
uint64_t mix_seed(uint64_t seed, uint64_t index);

template <class T>
void init_uniform(std::span<T> x, double lo, double hi, uint64_t seed);

template <class T>
void init_normal(std::span<T> x, double mean, double std, uint64_t seed);

// p must be 2-D (out, in).
template <class T>
void xavier_uniform(Parameter<T>& p, double gain, uint64_t seed);

template <class T>
void xavier_normal(Parameter<T>& p, double gain, uint64_t seed);

}  // namespace addnorm::nn
