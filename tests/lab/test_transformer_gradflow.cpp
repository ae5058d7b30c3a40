// lab: the transformer gradient-flow report on a tiny configuration. The gradients it reports are
// those of the modules' own backward (nn::EncoderStack::forward/backward run here directly), its
// loss gradient agrees with central finite differences, the xiong setup is what it says, and the
// average over seeds is the average of the samples.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/lab/transformer_gradflow.hpp"
#include "addnorm/nn/init.hpp"

namespace {

namespace lab = addnorm::lab;
namespace nn = addnorm::nn;
using addnorm::View2D;

lab::TransformerGradflowConfig tiny(nn::Placement p, nn::NormType n, lab::GradflowSetup setup) {
  lab::TransformerGradflowConfig c;
  c.placement = p;
  c.norm = n;
  c.layers = 3;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 12;
  c.seq = 3;
  c.batch = 2;
  c.vocab = 5;
  c.setup = setup;
  return c;
}

// The group of a layer parameter's local name, as the header documents it.
std::string group_of(const std::string& local) {
  if (local.rfind("self_attn.", 0) == 0) return "attention";
  if (local == "ffn.linear1.weight") return "ffn_w1";
  if (local == "ffn.linear2.weight") return "ffn_w2";
  if (local.rfind("ffn.", 0) == 0) return "ffn_bias";
  if (local.rfind("rezero", 0) == 0) return "rezero";
  return "norm";
}

void expect_rel(double actual, double expected, const std::string& what) {
  EXPECT_NEAR(actual, expected, 1e-12 * std::max(1.0, std::fabs(expected))) << what;
}

using Case = std::tuple<nn::Placement, nn::NormType, lab::GradflowSetup>;

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(nn::placement_name(std::get<0>(info.param))) + "_" +
         std::string(nn::norm_type_name(std::get<1>(info.param))) + "_" +
         std::string(lab::gradflow_setup_name(std::get<2>(info.param)));
}

class GradflowCase : public ::testing::TestWithParam<Case> {};

// Everything measure_gradflow_sample reports, recomputed from the stack's own forward and backward.
TEST_P(GradflowCase, ReportsTheModulesGradients) {
  const auto [p, n, setup] = GetParam();
  const lab::TransformerGradflowConfig c = tiny(p, n, setup);
  const bool xiong = setup == lab::GradflowSetup::xiong;
  const lab::GradflowBatch batch = lab::make_gradflow_batch(c, 12);
  auto a = lab::make_gradflow_model<double>(c, 11);
  const lab::GradflowSample s = lab::measure_gradflow_sample(a, batch, c);

  auto b = lab::make_gradflow_model<double>(c, 11);
  const int64_t rows = c.batch * c.seq, d = c.d_model;
  std::vector<double> x0 = batch.inputs, y(static_cast<size_t>(rows * d)), z(static_cast<size_t>(rows * c.vocab));
  if (!xiong) {
    x0.resize(y.size());
    b.embedding.forward(View2D<double>(x0.data(), rows, d), batch.tokens);
  }
  b.stack.forward(View2D<double>(y.data(), rows, d), View2D<const double>(x0.data(), rows, d), c.batch, {}, !xiong,
                  nn::Mode{true, 0});
  b.readout.forward(View2D<double>(z.data(), rows, c.vocab), View2D<const double>(y.data(), rows, d));
  // The loss and its gradient, written out here: mean over rows of lse - z_target.
  double loss = 0;
  std::vector<double> dz(z.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < c.vocab; ++j) sum += std::exp(z[static_cast<size_t>(r * c.vocab + j)]);
    loss += std::log(sum) - z[static_cast<size_t>(r * c.vocab + batch.targets[static_cast<size_t>(r)])];
    for (int64_t j = 0; j < c.vocab; ++j)
      dz[static_cast<size_t>(r * c.vocab + j)] =
          (std::exp(z[static_cast<size_t>(r * c.vocab + j)]) / sum - (j == batch.targets[static_cast<size_t>(r)])) /
          static_cast<double>(rows);
  }
  loss /= static_cast<double>(rows);
  expect_rel(s.loss, loss, "loss");

  std::vector<double> dy(y.size()), dx(y.size());
  b.readout.backward(View2D<double>(dy.data(), rows, d), View2D<const double>(dz.data(), rows, c.vocab),
                     View2D<const double>(y.data(), rows, d));
  b.stack.backward(View2D<double>(dx.data(), rows, d), View2D<const double>(dy.data(), rows, d),
                   View2D<const double>(x0.data(), rows, d));
  if (!xiong) b.embedding.backward(View2D<const double>(dx.data(), rows, d), batch.tokens);

  // Group norms from the parameter list, by name.
  nn::ParameterList<double> params;
  b.stack.parameters(params, "");
  std::map<std::string, std::vector<double>> groups;
  for (const auto& e : params) {
    if (e.name.rfind("layers.", 0) != 0) continue;
    const size_t dot = e.name.find('.', 7);
    const auto layer = static_cast<size_t>(std::stoi(e.name.substr(7, dot - 7)));
    auto& g = groups[group_of(e.name.substr(dot + 1))];
    g.resize(static_cast<size_t>(c.layers), 0.0);
    for (const double v : e.param->grad) g[layer] += v * v;
  }
  ASSERT_EQ(s.group_names.size(), groups.size());
  for (size_t k = 0; k < s.group_names.size(); ++k) {
    ASSERT_TRUE(groups.count(s.group_names[k])) << s.group_names[k];
    for (int64_t l = 0; l < c.layers; ++l)
      expect_rel(s.groups[k][static_cast<size_t>(l)], std::sqrt(groups[s.group_names[k]][static_cast<size_t>(l)]),
                 s.group_names[k] + " of layer " + std::to_string(l));
  }
  // Outside the layers.
  const auto model_group = [&](const std::string& name) {
    for (size_t k = 0; k < s.model_group_names.size(); ++k)
      if (s.model_group_names[k] == name) return s.model_groups[k];
    return -1.0;
  };
  double readout = 0, emb = 0, fnorm = 0;
  for (const double v : b.readout.weight.grad) readout += v * v;
  for (const double v : b.embedding.weight.grad) emb += v * v;
  for (auto* prm : {&b.stack.norm.weight, &b.stack.norm.bias})
    for (const double v : prm->grad) fnorm += v * v;
  expect_rel(model_group("readout"), std::sqrt(readout), "readout");
  expect_rel(model_group("embedding"), xiong ? -1.0 : std::sqrt(emb), "embedding");
  expect_rel(model_group("final_norm"), nn::needs_final_norm(p) ? std::sqrt(fnorm) : -1.0, "final norm");
  // Without a final norm the stack's output is the last layer's: its mean squared norm is the
  // last hidden_norm_sq.
  ASSERT_EQ(s.hidden_norm_sq.size(), static_cast<size_t>(c.layers));
  if (!nn::needs_final_norm(p)) {
    double h = 0;
    for (const double v : y) h += v * v;
    expect_rel(s.hidden_norm_sq.back(), h / static_cast<double>(rows), "hidden_norm_sq of the last layer");
  }
  EXPECT_EQ(s.sum_norm_sq.size(), p == nn::Placement::post || p == nn::Placement::deepnorm ? s.hidden_norm_sq.size() : 0u);
  // measure_gradflow_sample leaves the batch's gradients in the model, as the stack does.
  nn::ParameterList<double> pa;
  a.stack.parameters(pa, "");
  for (size_t i = 0; i < pa.size(); ++i)
    for (size_t j = 0; j < pa[i].param->grad.size(); ++j)
      ASSERT_NEAR(pa[i].param->grad[j], params[i].param->grad[j], 1e-13) << pa[i].name;
}

INSTANTIATE_TEST_SUITE_P(
    Lab, GradflowCase,
    ::testing::Values(Case{nn::Placement::post, nn::NormType::layer, lab::GradflowSetup::standard},
                      Case{nn::Placement::pre, nn::NormType::layer, lab::GradflowSetup::standard},
                      Case{nn::Placement::sandwich, nn::NormType::rms, lab::GradflowSetup::standard},
                      Case{nn::Placement::deepnorm, nn::NormType::layer, lab::GradflowSetup::standard},
                      Case{nn::Placement::rezero, nn::NormType::layer, lab::GradflowSetup::standard},
                      Case{nn::Placement::none, nn::NormType::layer, lab::GradflowSetup::standard},
                      Case{nn::Placement::post, nn::NormType::batch, lab::GradflowSetup::standard},
                      Case{nn::Placement::pre, nn::NormType::scale, lab::GradflowSetup::xiong},
                      Case{nn::Placement::post, nn::NormType::layer, lab::GradflowSetup::xiong},
                      Case{nn::Placement::deepnorm, nn::NormType::rms, lab::GradflowSetup::xiong}),
    case_name);

// The reported loss's gradient against central differences of the reported loss.
TEST(Gradflow, LossGradientMatchesFiniteDifferences) {
  for (const auto p : {nn::Placement::post, nn::Placement::pre}) {
    const auto c = tiny(p, nn::NormType::layer, lab::GradflowSetup::standard);
    const auto batch = lab::make_gradflow_batch(c, 3);
    auto m = lab::make_gradflow_model<double>(c, 4);
    lab::measure_gradflow_sample(m, batch, c);
    for (auto* prm : {&m.stack.layers[0].ffn.linear2.weight, &m.stack.layers[2].self_attn.q_proj.weight,
                      &m.readout.weight, &m.embedding.weight}) {
      const std::vector<double> g = prm->grad;
      for (size_t i = 0; i < g.size(); i += 7) {
        const double x = prm->value[i], h = 1e-5;
        prm->value[i] = x + h;
        auto tmp = m;
        const double up = lab::measure_gradflow_sample(tmp, batch, c).loss;
        prm->value[i] = x - h;
        tmp = m;
        const double down = lab::measure_gradflow_sample(tmp, batch, c).loss;
        prm->value[i] = x;
        EXPECT_NEAR(g[i], (up - down) / (2 * h), 1e-7 + 1e-5 * std::fabs(g[i])) << prm->name << "[" << i << "]";
      }
    }
  }
}

TEST(Gradflow, XiongSetupIsXiongs) {
  auto c = tiny(nn::Placement::post, nn::NormType::layer, lab::GradflowSetup::xiong);
  c.d_model = 16;
  c.d_ff = 16;
  c.heads = 4;  // ignored: one head
  const auto m = lab::make_gradflow_model<double>(c, 9);
  EXPECT_TRUE(m.embedding.weight.empty());
  for (const auto& layer : m.stack.layers) {
    EXPECT_EQ(layer.config().heads, 1);
    EXPECT_EQ(layer.config().activation, nn::Activation::relu);
    for (const double v : layer.self_attn.q_proj.weight.value) ASSERT_EQ(v, 0.0);
    for (const double v : layer.self_attn.k_proj.weight.value) ASSERT_EQ(v, 0.0);
    for (const auto* b : {&layer.self_attn.q_proj.bias, &layer.self_attn.v_proj.bias, &layer.self_attn.out_proj.bias,
                          &layer.ffn.linear1.bias, &layer.ffn.linear2.bias})
      for (const double v : b->value) ASSERT_EQ(v, 0.0);
  }
  // W ~ N(0, 1/d): the sample variance of all layers' W^1 entries is near 1/16.
  double s = 0, n = 0;
  for (const auto& layer : m.stack.layers)
    for (const double v : layer.ffn.linear1.weight.value) s += v * v, n += 1;
  EXPECT_NEAR(s / n, 1.0 / 16, 0.25 / 16);
  const auto batch = lab::make_gradflow_batch(c, 2);
  EXPECT_TRUE(batch.tokens.empty());
  ASSERT_EQ(batch.inputs.size(), static_cast<size_t>(c.batch * c.seq * c.d_model));
}

TEST(Gradflow, SeedsAverageTheSamples) {
  const auto c = tiny(nn::Placement::pre, nn::NormType::rms, lab::GradflowSetup::standard);
  const auto r = lab::transformer_gradflow<double>(c, 3, 77);
  EXPECT_EQ(r.seeds, 3);
  std::vector<lab::GradflowSample> s;
  for (uint64_t k = 0; k < 3; ++k) {
    auto m = lab::make_gradflow_model<double>(c, nn::mix_seed(77, 2 * k));
    s.push_back(lab::measure_gradflow_sample(m, lab::make_gradflow_batch(c, nn::mix_seed(77, 2 * k + 1)), c));
  }
  const double mean = (s[0].loss + s[1].loss + s[2].loss) / 3;
  expect_rel(r.loss.mean[0], mean, "loss mean");
  double q = 0;
  for (const auto& x : s) q += (x.loss - mean) * (x.loss - mean);
  expect_rel(r.loss.sd[0], std::sqrt(q / 2), "loss sd");
  const lab::Spread* w2 = r.group("ffn_w2");
  ASSERT_NE(w2, nullptr);
  const size_t k = 2;  // ffn_w2 is the third group
  ASSERT_EQ(s[0].group_names[k], "ffn_w2");
  expect_rel(w2->mean[1], (s[0].groups[k][1] + s[1].groups[k][1] + s[2].groups[k][1]) / 3, "ffn_w2 mean");
  EXPECT_EQ(r.group("rezero"), nullptr);
  EXPECT_TRUE(s[0].loss != s[1].loss);  // different samples
  // f32 tells the same story to f32 precision.
  const auto r32 = lab::transformer_gradflow<float>(c, 3, 77);
  EXPECT_NEAR(r32.loss.mean[0], r.loss.mean[0], 1e-4);
  EXPECT_NEAR(r32.group("ffn_w2")->mean[1], w2->mean[1], 1e-3 * w2->mean[1]);
}

TEST(Gradflow, BadConfigurationsThrow) {
  auto c = tiny(nn::Placement::post, nn::NormType::layer, lab::GradflowSetup::standard);
  c.heads = 3;
  EXPECT_THROW(c.check(), addnorm::Error);
  c.heads = 2;
  c.layers = 0;
  EXPECT_THROW(lab::transformer_gradflow<float>(c, 1, 0), addnorm::Error);
  c.layers = 2;
  EXPECT_THROW(lab::transformer_gradflow<float>(c, 0, 0), addnorm::Error);
  c.vocab = 1;
  EXPECT_THROW(c.check(), addnorm::Error);
  EXPECT_THROW(lab::parse_gradflow_setup("xavier"), addnorm::Error);
  try {
    c.vocab = 5;
    c.heads = 3;
    c.check();
  } catch (const addnorm::Error& e) {
    EXPECT_STREQ(e.what(), "[transformer_gradflow] heads (3) must divide d_model (8)");
  }
}

}  // namespace
