// SGD, Adam, AdamW and gradient clipping. See include/addnorm/nn/optimizer.hpp.
#include "addnorm/nn/optimizer.hpp"

#include <cmath>
#include <string>

#include "addnorm/core/error.hpp"

namespace addnorm::nn {

OptimizerKind parse_optimizer(std::string_view name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "adam") return OptimizerKind::adam;
  if (name == "adamw") return OptimizerKind::adamw;
  fail("parse_optimizer", "unknown optimizer '", std::string(name), "' (expected sgd, adam or adamw)");
}

std::string_view optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::adamw: return "adamw";
  }
  return "?";
}

template <class T>
Optimizer<T>::Optimizer(const OptimizerConfig& config, const ParameterList<T>& params)
    : config_(config), params_(params) {
  constexpr const char* fn = "Optimizer";
  const auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  require(finite_nonneg(config.weight_decay), fn, "weight_decay must be finite and >= 0, got ", config.weight_decay);
  if (config.kind == OptimizerKind::sgd) {
    require(finite_nonneg(config.momentum), fn, "momentum must be finite and >= 0, got ", config.momentum);
    require(!config.nesterov || (config.momentum > 0 && config.dampening == 0), fn,
            "nesterov needs momentum > 0 and dampening 0");
  } else {
    require(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1, fn,
            "betas must be in [0, 1), got ", config.beta1, " and ", config.beta2);
    require(finite_nonneg(config.eps), fn, "eps must be finite and >= 0, got ", config.eps);
  }
  m_.resize(params_.size());
  v_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    require(params_[i].param != nullptr, fn, "parameter ", params_[i].name, " is null");
    const size_t n = params_[i].param->value.size();
    if (config.kind != OptimizerKind::sgd || config.momentum != 0) m_[i].assign(n, T(0));
    if (config.kind != OptimizerKind::sgd) v_[i].assign(n, T(0));
  }
}

template <class T>
void Optimizer<T>::step(double lr) {
  require(std::isfinite(lr) && lr >= 0, "Optimizer::step", "lr must be finite and >= 0, got ", lr);
  ++t_;
  const auto& c = config_;
  const auto t = static_cast<double>(t_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter<T>& p = *params_[i].param;
    require(p.grad.size() == p.value.size() && m_[i].size() == (m_[i].empty() ? 0 : p.value.size()),
            "Optimizer::step", "parameter ", params_[i].name, " changed size");
    const double wd_d = (c.decay_matrices_only && p.shape.size() < 2) ? 0.0 : c.weight_decay;
    const auto wd = static_cast<T>(wd_d);
    T* w = p.value.data();
    const T* g = p.grad.data();
    const size_t n = p.value.size();
    if (c.kind == OptimizerKind::sgd) {
      const auto mom = static_cast<T>(c.momentum), damp = static_cast<T>(1.0 - c.dampening),
                 step = static_cast<T>(lr);
      T* b = m_[i].data();
      for (size_t k = 0; k < n; ++k) {
        T d = g[k] + wd * w[k];
        if (c.momentum != 0) {
          b[k] = t_ == 1 ? d : mom * b[k] + damp * d;
          d = c.nesterov ? d + mom * b[k] : b[k];
        }
        w[k] -= step * d;
      }
      continue;
    }
    const bool adamw = c.kind == OptimizerKind::adamw;
    const auto b1 = static_cast<T>(c.beta1), b2 = static_cast<T>(c.beta2), eps = static_cast<T>(c.eps);
    const auto one_b1 = static_cast<T>(1.0 - c.beta1), one_b2 = static_cast<T>(1.0 - c.beta2);
    const auto step_size = static_cast<T>(lr / (1.0 - std::pow(c.beta1, t)));
    const auto bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(c.beta2, t)));
    const auto decay = static_cast<T>(1.0 - lr * wd_d);
    T* m = m_[i].data();
    T* v = v_[i].data();
    for (size_t k = 0; k < n; ++k) {
      T gk = g[k];
      if (adamw) {
        w[k] *= decay;
      } else {
        gk += wd * w[k];
      }
      m[k] = b1 * m[k] + one_b1 * gk;
      v[k] = b2 * v[k] + one_b2 * gk * gk;
      w[k] -= step_size * m[k] / (std::sqrt(v[k]) / bc2_sqrt + eps);
    }
  }
}

template <class T>
double clip_grad_norm(const ParameterList<T>& params, double max_norm) {
  double ss = 0;
  for (const auto& e : params)
    for (const T g : e.param->grad) ss += static_cast<double>(g) * static_cast<double>(g);
  const double total = std::sqrt(ss);
  if (max_norm > 0 && std::isfinite(max_norm) && total > max_norm) {
    const auto coef = static_cast<T>(max_norm / (total + 1e-6));
    for (const auto& e : params)
      for (T& g : e.param->grad) g *= coef;
  }
  return total;
}

template class Optimizer<float>;
template class Optimizer<double>;
template double clip_grad_norm<float>(const ParameterList<float>&, double);
template double clip_grad_norm<double>(const ParameterList<double>&, double);

}  // namespace addnorm::nn
