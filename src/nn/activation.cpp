// ReLU and GELU (erf and tanh forms). See include/addnorm/nn/activation.hpp.
#include "addnorm/nn/activation.hpp"

#include <cmath>
#include <numbers>

#include "addnorm/core/error.hpp"
#include "addnorm/norm/types.hpp"

namespace addnorm::nn {

Activation parse_activation(std::string_view name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_tanh") return Activation::gelu_tanh;
  fail("parse_activation", "unknown activation '", name, "' (expected relu, gelu or gelu_tanh)");
}

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::relu: return "relu";
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
  }
  return "?";
}

namespace {
template <class C>
constexpr C kInvSqrt2 = static_cast<C>(0.70710678118654752440);
template <class C>
constexpr C kInvSqrt2Pi = static_cast<C>(0.39894228040143267794);
template <class C>
constexpr C kSqrt2OverPi = static_cast<C>(0.79788456080286535588);
template <class C>
constexpr C kCoef = static_cast<C>(0.044715);

template <class T, class U>
void check(std::span<T> a, std::span<U> b, const char* fn) {
  require(a.size() == b.size(), fn, "sizes differ: ", a.size(), " and ", b.size());
}
}  // namespace

template <class T>
void activation_forward(std::span<T> y, std::span<const T> x, Activation a) {
  using C = compute_t<T>;
  check(y, x, "activation_forward");
  const size_t n = x.size();
  switch (a) {
    case Activation::relu:
      for (size_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
      break;
    case Activation::gelu:
      for (size_t i = 0; i < n; ++i) {
        const C v = static_cast<C>(x[i]);
        y[i] = static_cast<T>(C(0.5) * v * (C(1) + std::erf(v * kInvSqrt2<C>)));
      }
      break;
    case Activation::gelu_tanh:
      for (size_t i = 0; i < n; ++i) {
        const C v = static_cast<C>(x[i]);
        y[i] = static_cast<T>(C(0.5) * v * (C(1) + std::tanh(kSqrt2OverPi<C> * (v + kCoef<C> * v * v * v))));
      }
      break;
  }
}

// dx = dy * act'(x); the derivatives are written out in the header.
template <class T>
void activation_backward(std::span<T> dx, std::span<const T> dy, std::span<const T> x, Activation a) {
  using C = compute_t<T>;
  check(dx, x, "activation_backward");
  check(dy, x, "activation_backward");
  const size_t n = x.size();
  switch (a) {
    case Activation::relu:
      for (size_t i = 0; i < n; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
      break;
    case Activation::gelu:
      for (size_t i = 0; i < n; ++i) {
        const C v = static_cast<C>(x[i]);
        const C cdf = C(0.5) * (C(1) + std::erf(v * kInvSqrt2<C>));
        const C pdf = kInvSqrt2Pi<C> * std::exp(C(-0.5) * v * v);
        dx[i] = static_cast<T>(static_cast<C>(dy[i]) * (cdf + v * pdf));
      }
      break;
    case Activation::gelu_tanh:
      for (size_t i = 0; i < n; ++i) {
        const C v = static_cast<C>(x[i]);
        const C t = std::tanh(kSqrt2OverPi<C> * (v + kCoef<C> * v * v * v));
        const C du = kSqrt2OverPi<C> * (C(1) + C(3) * kCoef<C> * v * v);
        dx[i] = static_cast<T>(static_cast<C>(dy[i]) * (C(0.5) * (C(1) + t) + C(0.5) * v * (C(1) - t * t) * du));
      }
      break;
  }
}

template void activation_forward<float>(std::span<float>, std::span<const float>, Activation);
template void activation_forward<double>(std::span<double>, std::span<const double>, Activation);
template void activation_backward<float>(std::span<float>, std::span<const float>, std::span<const float>, Activation);
template void activation_backward<double>(std::span<double>, std::span<const double>, std::span<const double>,
                                          Activation);

}  // namespace addnorm::nn
