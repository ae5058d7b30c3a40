// nn: SGD (momentum, dampening, Nesterov, weight decay), Adam, AdamW over a ParameterList against
// PyTorch 1.13's torch.optim (five steps, reference values from torch_reference.py), schedules
// against hand-computed values, clipping by global norm.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/optimizer.hpp"
#include "addnorm/nn/schedule.hpp"

namespace {

namespace nn = addnorm::nn;

struct Problem {
  nn::Parameter<double> p0{"p0", {2, 3}}, p1{"p1", {3}};
  nn::ParameterList<double> list;
  Problem() {
    for (int k = 0; k < 3; ++k) {
      p0.value[static_cast<size_t>(k)] = 0.1 * k - 0.2;
      p0.value[static_cast<size_t>(3 + k)] = 0.1 * k + 0.3;
      p1.value[static_cast<size_t>(k)] = 0.5 - 0.3 * k;
    }
    nn::add_parameter(list, "", p0);
    nn::add_parameter(list, "", p1);
  }
  // The gradient of sum(0.25 w^2 + sin(1.3 t + k) w), k counting from 10 i in parameter i.
  void grads(int t) {
    for (size_t i = 0; i < list.size(); ++i) {
      auto& p = *list[i].param;
      for (size_t k = 0; k < p.value.size(); ++k)
        p.grad[k] = 0.5 * p.value[k] + std::sin(1.3 * t + static_cast<double>(k + 10 * i));
    }
  }
  std::vector<double> values() const {
    std::vector<double> v = p0.value;
    v.insert(v.end(), p1.value.begin(), p1.value.end());
    return v;
  }
};

struct TorchCase {
  std::string name;
  nn::OptimizerConfig config;
  double lr;
  std::vector<double> want;
};

nn::OptimizerConfig sgd(double momentum, double dampening, bool nesterov, double wd) {
  nn::OptimizerConfig c;
  c.kind = nn::OptimizerKind::sgd;
  c.momentum = momentum;
  c.dampening = dampening;
  c.nesterov = nesterov;
  c.weight_decay = wd;
  return c;
}

nn::OptimizerConfig adam(nn::OptimizerKind kind, double b1, double b2, double eps, double wd, bool matrices_only) {
  nn::OptimizerConfig c;
  c.kind = kind;
  c.beta1 = b1;
  c.beta2 = b2;
  c.eps = eps;
  c.weight_decay = wd;
  c.decay_matrices_only = matrices_only;
  return c;
}

TEST(Optimizer, FiveStepsMatchTorch) {
  using K = nn::OptimizerKind;
  const std::vector<TorchCase> cases{
      {"sgd momentum 0.9 wd 0.01", sgd(0.9, 0, false, 0.01), 0.1,
       {-0.23545151553111818, 0.017127404234035467, 0.21654453273183027, 0.29826191989092793, 0.13661317440392734, -0.00097735439947948697, 0.24154573697217413, -0.086927492423889349, -0.26065011656878345}},
      {"sgd nesterov 0.8", sgd(0.8, 0, true, 0), 0.1,
       {-0.12189744779116134, -0.015546270052913565, 0.066965849814594011, 0.17086053561140299, 0.14911285409709249, 0.14280040964343929, 0.20968776280670035, 0.026957426559850419, -0.10429298962140145}},
      {"sgd momentum 0.9 dampening 0.5", sgd(0.9, 0.5, false, 0), 0.1,
       {-0.39492887760391182, -0.17352134891723586, 0.1524003461469573, 0.45789444001259327, 0.38777560794717036, 0.18121991658311601, 0.50751660141755639, 0.076834349007365257, -0.31444792637586383}},
      {"adam", adam(K::adam, 0.8, 0.95, 1e-6, 0.01, false), 0.01,
       {-0.21294097167714024, -0.10122738087696, 0.025233857520817523, 0.31242554253707389, 0.39590006821835633, 0.46631560888023005, 0.49825692870764909, 0.19188193265991982, -0.12050724222980318}},
      {"adamw", adam(K::adamw, 0.9, 0.999, 1e-8, 0.1, false), 0.01,
       {-0.21490267832321003, -0.10211049924057583, 0.027048475743367575, 0.31398995776162902, 0.39565497725838683, 0.46257041999452803, 0.49811073556465096, 0.19033956911115593, -0.12289240599381776}},
      {"adamw matrices only", adam(K::adamw, 0.9, 0.999, 1e-8, 0.1, true), 0.01,
       {-0.21490267832321003, -0.10211049924057583, 0.027048475743367575, 0.31398995776162902, 0.39565497725838683, 0.46257041999452803, 0.50062840063031577, 0.19133319572682581, -0.12346917492108615}},
  };
  for (const auto& c : cases) {
    Problem p;
    nn::Optimizer<double> opt(c.config, p.list);
    for (int t = 1; t <= 5; ++t) {
      p.grads(t);
      opt.step(c.lr);
    }
    EXPECT_EQ(opt.steps(), 5);
    const auto got = p.values();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], c.want[i], 1e-14) << c.name << " element " << i;
  }
}

TEST(Optimizer, FloatFollowsDouble) {
  nn::Parameter<float> pf("p", {4});
  nn::Parameter<double> pd("p", {4});
  nn::ParameterList<float> lf;
  nn::ParameterList<double> ld;
  nn::add_parameter(lf, "", pf);
  nn::add_parameter(ld, "", pd);
  nn::Optimizer<float> of(adam(nn::OptimizerKind::adamw, 0.9, 0.999, 1e-8, 0.01, false), lf);
  nn::Optimizer<double> od(adam(nn::OptimizerKind::adamw, 0.9, 0.999, 1e-8, 0.01, false), ld);
  for (int t = 1; t <= 5; ++t) {
    for (size_t k = 0; k < 4; ++k) {
      pd.grad[k] = std::cos(t + 2.0 * static_cast<double>(k));
      pf.grad[k] = static_cast<float>(pd.grad[k]);
    }
    of.step(1e-2);
    od.step(1e-2);
  }
  for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(pf.value[k], pd.value[k], 1e-6) << k;
}

// Hand-computed: SGD without momentum is p - lr * (g + wd p); one Adam step moves each element by
// lr * sign(g) (m / sqrt(v) after bias correction is g / |g|, up to eps).
TEST(Optimizer, HandComputedFirstSteps) {
  Problem p;
  const auto before = p.values();
  p.grads(1);
  std::vector<double> g = p.p0.grad;
  g.insert(g.end(), p.p1.grad.begin(), p.p1.grad.end());
  nn::Optimizer<double> opt(sgd(0, 0, false, 0.5), p.list);
  opt.step(0.1);
  auto after = p.values();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_NEAR(after[i], before[i] - 0.1 * (g[i] + 0.5 * before[i]), 1e-15);

  Problem q;
  q.grads(1);
  nn::Optimizer<double> a(adam(nn::OptimizerKind::adam, 0.9, 0.999, 0.0, 0.0, false), q.list);
  a.step(0.01);
  after = q.values();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_NEAR(after[i], before[i] - 0.01 * (g[i] > 0 ? 1 : -1), 1e-15);
}

TEST(Optimizer, Errors) {
  Problem p;
  EXPECT_THROW(nn::Optimizer<double>(adam(nn::OptimizerKind::adam, 1.0, 0.999, 1e-8, 0, false), p.list),
               addnorm::Error);
  EXPECT_THROW(nn::Optimizer<double>(sgd(0, 0, true, 0), p.list), addnorm::Error);
  EXPECT_THROW(nn::Optimizer<double>(sgd(0.9, 0, false, -1), p.list), addnorm::Error);
  nn::Optimizer<double> opt(sgd(0.9, 0, false, 0), p.list);
  EXPECT_THROW(opt.step(std::nan("")), addnorm::Error);
  EXPECT_EQ(nn::parse_optimizer("adamw"), nn::OptimizerKind::adamw);
  EXPECT_THROW(nn::parse_optimizer("lion"), addnorm::Error);
}

TEST(ClipGradNorm, ScalesOnlyAboveTheLimit) {
  Problem p;
  p.p0.grad = {3, 0, 0, 0, 0, 0};
  p.p1.grad = {0, 4, 0};
  EXPECT_DOUBLE_EQ(nn::clip_grad_norm(p.list, 10.0), 5.0);  // below: untouched
  EXPECT_EQ(p.p0.grad[0], 3.0);
  EXPECT_DOUBLE_EQ(nn::clip_grad_norm(p.list, 1.0), 5.0);  // above: scaled by 1 / (5 + 1e-6)
  EXPECT_NEAR(p.p0.grad[0], 3.0 / (5.0 + 1e-6), 1e-15);
  EXPECT_NEAR(p.p1.grad[1], 4.0 / (5.0 + 1e-6), 1e-15);
  EXPECT_NEAR(nn::clip_grad_norm(p.list, 0.0), 1.0, 1e-6);  // 0: measures only
}

TEST(Schedule, HandComputedValues) {
  using K = nn::ScheduleKind;
  EXPECT_EQ((nn::Schedule{K::constant, 0.5}).at(1000), 0.5);
  const nn::Schedule warm{K::linear_warmup, 1e-3, 10};
  EXPECT_DOUBLE_EQ(warm.at(1), 1e-4);
  EXPECT_DOUBLE_EQ(warm.at(5), 5e-4);
  EXPECT_DOUBLE_EQ(warm.at(10), 1e-3);
  EXPECT_DOUBLE_EQ(warm.at(11), 1e-3);
  // Vaswani: d^-0.5 min(t^-0.5, t warmup^-1.5), d = 512, warmup = 4000
  const nn::Schedule noam{K::inverse_sqrt, 1.0, 4000, 0, 0.0, 512};
  EXPECT_NEAR(noam.at(1), 1.0 / std::sqrt(512.0) * std::pow(4000.0, -1.5), 1e-20);
  EXPECT_NEAR(noam.at(4000), 1.0 / std::sqrt(512.0) / std::sqrt(4000.0), 1e-18);  // the peak, 6.9877e-4
  EXPECT_NEAR(noam.at(4000), 6.987712429686844e-4, 1e-15);
  EXPECT_NEAR(noam.at(16000), 1.0 / std::sqrt(512.0) / 126.49110640673517, 1e-18);
  // cosine: warm-up 10, total 110, lr 1, min 0.1
  const nn::Schedule cosine{K::cosine, 1.0, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(cosine.at(5), 0.5);
  EXPECT_DOUBLE_EQ(cosine.at(10), 1.0);
  EXPECT_NEAR(cosine.at(60), 0.55, 1e-15);                   // halfway: min + (lr - min) / 2
  EXPECT_NEAR(cosine.at(35), 0.1 + 0.45 * (1 + std::sqrt(0.5)), 1e-15);
  EXPECT_NEAR(cosine.at(110), 0.1, 1e-15);
  EXPECT_NEAR(cosine.at(500), 0.1, 1e-15);
}

TEST(Schedule, Errors) {
  using K = nn::ScheduleKind;
  EXPECT_THROW((void)(nn::Schedule{K::constant, 1.0}).at(0), addnorm::Error);
  EXPECT_THROW((void)(nn::Schedule{K::inverse_sqrt, 1.0, 0}).at(1), addnorm::Error);
  EXPECT_THROW((void)(nn::Schedule{K::cosine, 1.0, 10, 10}).at(1), addnorm::Error);
  EXPECT_EQ(nn::parse_schedule("noam"), K::inverse_sqrt);
  EXPECT_THROW(nn::parse_schedule("step"), addnorm::Error);
}

}  // namespace
