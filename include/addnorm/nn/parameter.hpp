// Parameters: a module's learnable tensors, each with a name, a shape, a value buffer and a
// gradient buffer of the same size. A model's parameters are a named list (ParameterList) of
// pointers into its modules, built on demand by `parameters(list, prefix)`; checkpoints, gradient
// reports and optimizers all iterate over that one list.
//
// Convention for every backward in nn/: gradients of parameters accumulate (+=) into
// Parameter::grad; call zero_grad before a step. Gradients of inputs are overwritten (=) unless the
// function's header line says otherwise.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/core/view.hpp"

namespace addnorm::nn {

template <class T>
struct Parameter {
  std::string name;             // local name within its module, e.g. "weight"
  std::vector<int64_t> shape;   // e.g. {out, in} for a Linear weight
  std::vector<T> value;         // numel()
  std::vector<T> grad;          // numel(); backward accumulates (+=) into it

  Parameter() = default;
  Parameter(std::string n, std::vector<int64_t> s, T fill = T(0)) : name(std::move(n)), shape(std::move(s)) {
    int64_t count = 1;
    for (const int64_t e : shape) {
      require(e >= 0, "Parameter", name, " has a negative extent ", e);
      count *= e;
    }
    value.assign(static_cast<size_t>(count), fill);
    grad.assign(static_cast<size_t>(count), T(0));
  }

  [[nodiscard]] int64_t numel() const { return static_cast<int64_t>(value.size()); }
  [[nodiscard]] bool empty() const { return value.empty(); }
  // The value as a (shape[0], rest) matrix; a 1-D parameter is one row.
  [[nodiscard]] View2D<const T> matrix() const { return {value.data(), rows(), cols()}; }
  [[nodiscard]] View2D<T> grad_matrix() { return {grad.data(), rows(), cols()}; }
  [[nodiscard]] std::span<const T> values() const { return value; }
  [[nodiscard]] std::span<T> grads() { return grad; }
  void zero_grad() { grad.assign(grad.size(), T(0)); }

 private:
  [[nodiscard]] int64_t rows() const { return shape.size() <= 1 ? (value.empty() ? 0 : 1) : shape[0]; }
  [[nodiscard]] int64_t cols() const {
    const int64_t r = rows();
    return r == 0 ? 0 : numel() / r;
  }
};

// One entry of a model's parameter list: the full dotted name ("layers.0.self_attn.q_proj.weight")
// and the parameter it names.
template <class T>
struct NamedParameter {
  std::string name;
  Parameter<T>* param = nullptr;
};

template <class T>
using ParameterList = std::vector<NamedParameter<T>>;

// Appends p to list as prefix + p.name (nothing for an absent, empty parameter).
template <class T>
void add_parameter(ParameterList<T>& list, const std::string& prefix, Parameter<T>& p) {
  if (!p.empty()) list.push_back({prefix + p.name, &p});
}

// The total number of scalars in a list.
template <class T>
int64_t count_parameters(const ParameterList<T>& list) {
  int64_t n = 0;
  for (const auto& e : list) n += e.param->numel();
  return n;
}

template <class T>
void zero_grad(const ParameterList<T>& list) {
  for (const auto& e : list) e.param->zero_grad();
}

}  // namespace addnorm::nn
