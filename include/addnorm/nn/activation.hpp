// Element-wise activations of the feed-forward network, forward and backward.
//
//   relu(x)      = max(x, 0)                        relu'(x) = 1 if x > 0 else 0
//   gelu(x)      = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))          (PyTorch's default, "none")
//                  gelu'(x) = Phi(x) + x * phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   gelu_tanh(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2 / pi) (x + 0.044715 x^3)   (approximate="tanh")
//                  gelu_tanh'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2 / pi) (1 + 3 * 0.044715 x^2)
#pragma once

#include <span>
#include <string_view>

namespace addnorm::nn {

enum class Activation { relu, gelu, gelu_tanh };

// "relu", "gelu", "gelu_tanh"; throws Error for anything else.
Activation parse_activation(std::string_view name);
std::string_view activation_name(Activation a);

// y = act(x), element-wise. y may be x.
template <class T>
void activation_forward(std::span<T> y, std::span<const T> x, Activation a);

// dx = dy * act'(x) (=), element-wise; x is the activation's input. dx may be dy.
template <class T>
void activation_backward(std::span<T> dx, std::span<const T> dy, std::span<const T> x, Activation a);

}  // namespace addnorm::nn
