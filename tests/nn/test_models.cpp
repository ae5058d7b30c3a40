// nn: whole models. GPT-style decoder-only and encoder-decoder models against central finite
// differences in f64 (loss = cross-entropy with label smoothing and an ignored target, dropout on);
// GPT-2's init; parameter counts of count_model_parameters against the real parameter lists and
// the presets' published totals.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/gpt_model.hpp"
#include "addnorm/nn/param_count.hpp"
#include "addnorm/nn/seq2seq_model.hpp"
#include "gradcheck.hpp"

namespace {

namespace nn = addnorm::nn;

constexpr int64_t kBatch = 2, kT = 4, kS = 3, kVocab = 11;

nn::LayerConfig tiny_layer(nn::Placement p, nn::NormType n) {
  nn::LayerConfig c = nn::make_layer_config(8, 2, 12, nn::Activation::gelu_tanh, p);
  c.norm.type = n;
  c.dropout = c.attn_dropout = 0.1;
  return c;
}

// Norm weights away from 1, biases away from 0, ReZero's a away from 0: every gradient is worth checking.
void perturb(const nn::ParameterList<double>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].name;
    auto& v = params[i].param->value;
    if (name.find("rezero") != std::string::npos) {
      v[0] = 0.6;
    } else if (name.find("norm") != std::string::npos || name.find("bias") != std::string::npos) {
      const auto r = nn_test::random_vector(v.size(), 200 + i, 0.3);
      for (size_t k = 0; k < v.size(); ++k) v[k] += r[k];
    }
  }
}

const std::vector<int64_t> kIds{1, 5, 2, 9, 0, 3, 3, 10};
const std::vector<int64_t> kTargets{5, 2, 9, -100, 3, 3, 10, 7};  // one ignored target

using Case = std::tuple<nn::Placement, nn::NormType, bool>;

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(nn::placement_name(std::get<0>(info.param))) + "_" +
         std::string(nn::norm_type_name(std::get<1>(info.param))) + (std::get<2>(info.param) ? "_tied" : "_untied");
}

class ModelCase : public ::testing::TestWithParam<Case> {};

TEST_P(ModelCase, GptMatchesFiniteDifferences) {
  const auto [p, n, tied] = GetParam();
  nn::GptConfig config;
  config.vocab = kVocab;
  config.max_len = 6;
  config.layers = 2;
  config.layer = tiny_layer(p, n);
  config.tied = tied;
  config.init_std = 0.3;  // larger than GPT-2's 0.02, so that every path carries gradient
  config.loss = {0.1, -100};
  nn::GptModel<double> model(config, 7);
  nn::ParameterList<double> params;
  model.parameters(params);
  perturb(params);
  const std::vector<uint8_t> valid{1, 1, 1, 1, 1, 1, 1, 0};  // the last token of sequence 1 is padding
  const nn::Mode mode{true, 11};
  auto loss = [&] {
    model.forward(kIds, kBatch, valid, mode);
    return model.loss(kTargets);
  };
  loss();
  nn::zero_grad(params);
  model.backward();
  nn_test::expect_params_fd(params, loss, 1e-4, "gpt");
}

TEST_P(ModelCase, Seq2SeqMatchesFiniteDifferences) {
  const auto [p, n, tied] = GetParam();
  nn::Seq2SeqConfig config;
  config.vocab = kVocab;
  config.encoder_layers = 2;
  config.decoder_layers = 1;
  config.layer = tiny_layer(p, n);
  config.tied = tied;
  config.loss = {0.2, 0};  // targets 0 are padding
  nn::Seq2SeqModel<double> model(config, 8);
  nn::ParameterList<double> params;
  model.parameters(params);
  perturb(params);
  const std::vector<int64_t> src{4, 7, 1, 2, 8, 0};
  const std::vector<uint8_t> src_valid{1, 1, 1, 1, 1, 0};
  const std::vector<int64_t> targets{5, 2, 9, 1, 3, 3, 10, 0};
  const nn::Mode mode{true, 12};
  auto loss = [&] {
    model.forward(src, src_valid, kIds, {}, kBatch, mode);
    return model.loss(targets);
  };
  loss();
  nn::zero_grad(params);
  model.backward();
  nn_test::expect_params_fd(params, loss, 1e-4, "seq2seq");
}

INSTANTIATE_TEST_SUITE_P(
    Models, ModelCase,
    ::testing::Values(Case{nn::Placement::pre, nn::NormType::layer, true},
                      Case{nn::Placement::pre, nn::NormType::rms, false},
                      Case{nn::Placement::post, nn::NormType::layer, true},
                      Case{nn::Placement::sandwich, nn::NormType::scale, true},
                      Case{nn::Placement::deepnorm, nn::NormType::layer, false},
                      Case{nn::Placement::rezero, nn::NormType::none, true},
                      Case{nn::Placement::pre, nn::NormType::batch, true}),
    case_name);

TEST(GptModel, Gpt2Init) {
  nn::GptConfig config;
  config.vocab = 64;
  config.max_len = 16;
  config.layers = 8;
  config.layer = nn::make_layer_config(64, 4, 256, nn::Activation::gelu_tanh, nn::Placement::pre);
  nn::GptModel<double> model(config, 3);
  nn::ParameterList<double> params;
  model.parameters(params);
  const auto stddev = [](const std::vector<double>& v) {
    double s = 0, ss = 0;
    for (const double x : v) s += x;
    const double mean = s / static_cast<double>(v.size());
    for (const double x : v) ss += (x - mean) * (x - mean);
    return std::sqrt(ss / static_cast<double>(v.size()));
  };
  EXPECT_NEAR(stddev(model.wte.weight.value), 0.02, 0.001);
  EXPECT_NEAR(stddev(model.blocks.layers[3].self_attn.q_proj.weight.value), 0.02, 0.001);
  EXPECT_NEAR(stddev(model.blocks.layers[3].ffn.linear1.weight.value), 0.02, 0.001);
  EXPECT_NEAR(stddev(model.blocks.layers[3].ffn.linear2.weight.value), 0.02 / 4.0, 0.0003);  // 1 / sqrt(2 * 8)
  EXPECT_NEAR(stddev(model.blocks.layers[3].self_attn.out_proj.weight.value), 0.02 / 4.0, 0.0003);
  for (const double b : model.blocks.layers[0].ffn.linear1.bias.value) EXPECT_EQ(b, 0.0);
  for (const double g : model.blocks.norm.weight.value) EXPECT_EQ(g, 1.0);
  EXPECT_EQ(params.front().name, "wte.weight");
  EXPECT_EQ(params.back().name, "blocks.norm.bias");  // tied: no lm_head.weight
}

TEST(GptModel, Errors) {
  nn::GptConfig config;
  config.vocab = kVocab;
  config.max_len = 3;
  config.layers = 1;
  config.layer = tiny_layer(nn::Placement::pre, nn::NormType::layer);
  nn::GptModel<double> model(config, 1);
  EXPECT_THROW(model.forward(kIds, kBatch, {}, {}), addnorm::Error);  // T = 4 > max_len 3
  EXPECT_THROW(model.forward(kIds, 3, {}, {}), addnorm::Error);       // 8 ids, 3 sequences
}

// count_model_parameters (layers built once, tables from shapes) equals the real models' lists.
TEST(ParameterCount, EqualsTheRealParameterLists) {
  for (const auto p : {nn::Placement::post, nn::Placement::pre, nn::Placement::sandwich, nn::Placement::deepnorm,
                       nn::Placement::rezero, nn::Placement::none}) {
    for (const auto n : {nn::NormType::layer, nn::NormType::rms, nn::NormType::batch, nn::NormType::scale,
                         nn::NormType::none}) {
      for (const bool tied : {true, false}) {
        nn::LayerConfig layer = tiny_layer(p, n);
        layer.bias = !tied;  // both with and without biases
        nn::GptConfig g;
        g.vocab = kVocab;
        g.max_len = 6;
        g.layers = 3;
        g.layer = layer;
        g.tied = tied;
        nn::GptModel<float> gpt(g, 1);
        nn::ParameterList<float> gl;
        gpt.parameters(gl);
        nn::ModelSpec gs;
        gs.architecture = nn::Architecture::decoder_only;
        gs.vocab = kVocab;
        gs.max_len = 6;
        gs.decoder_layers = 3;
        gs.layer = layer;
        gs.head = tied ? nn::HeadKind::tied : nn::HeadKind::untied;
        const std::string what = std::string(nn::placement_name(p)) + " " + std::string(nn::norm_type_name(n));
        EXPECT_EQ(nn::count_model_parameters(gs).total, nn::count_parameters(gl)) << "gpt " << what;

        nn::Seq2SeqConfig q;
        q.vocab = kVocab;
        q.encoder_layers = 2;
        q.decoder_layers = 3;
        q.layer = layer;
        q.tied = tied;
        nn::Seq2SeqModel<float> s2s(q, 1);
        nn::ParameterList<float> ql;
        s2s.parameters(ql);
        nn::ModelSpec qs = gs;
        qs.architecture = nn::Architecture::encoder_decoder;
        qs.positions = nn::PositionKind::sinusoidal;
        qs.encoder_layers = 2;
        EXPECT_EQ(nn::count_model_parameters(qs).total, nn::count_parameters(ql)) << "seq2seq " << what;
        int64_t by_kind = 0;
        for (const auto& [k, c] : nn::count_model_parameters(qs).by_kind) by_kind += c;
        EXPECT_EQ(by_kind, nn::count_parameters(ql)) << "seq2seq by kind " << what;
      }
    }
  }
}

int64_t kind(const nn::ParameterCount& c, const std::string& k) {
  for (const auto& [name, n] : c.by_kind)
    if (name == k) return n;
  return -1;
}

TEST(ParameterCount, Presets) {
  EXPECT_EQ(nn::count_model_parameters(nn::model_preset("gpt2-small")).total, 124439808);
  EXPECT_EQ(nn::count_model_parameters(nn::model_preset("gpt2-medium")).total, 354823168);
  const auto bert = nn::count_model_parameters(nn::model_preset("bert-base"));
  EXPECT_EQ(bert.total, 109482240);
  EXPECT_EQ(kind(bert, "pooler"), 590592);
  EXPECT_EQ(kind(bert, "token_type"), 1536);
  const auto base = nn::count_model_parameters(nn::model_preset("transformer-base"));
  EXPECT_EQ(base.total, 63082496);
  EXPECT_EQ(kind(base, "norm"), 30720);  // the seeds' question: 6 + 6 layers, d_model 512
  EXPECT_EQ(kind(base, "position"), 0);
  EXPECT_EQ(kind(base, "head"), 0);
  EXPECT_EQ(kind(nn::count_model_parameters(nn::model_preset("gpt2-small")), "norm"), 38400);  // 25 x 2 x 768
  EXPECT_EQ(kind(bert, "norm"), 38400);  // 12 x 2 x 2 x 768 + the embedding norm
  for (const auto& name : nn::model_preset_names())
    EXPECT_EQ(kind(nn::count_model_parameters(nn::model_preset(name)), "other"), -1) << name;
  EXPECT_THROW(nn::model_preset("gpt3"), addnorm::Error);
}

}  // namespace
