// nn: Add & Norm boxes, encoder and decoder layers and 2-layer stacks for every placement x norm
// kind, against central finite differences in f64; fused and composed paths agree.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "addnorm/nn/stack.hpp"
#include "gradcheck.hpp"

namespace {

using addnorm::View2D;
namespace nn = addnorm::nn;

constexpr int64_t kBatch = 2, kT = 3, kS = 4, kD = 8, kHeads = 2, kFF = 12;

nn::LayerConfig small_config(nn::Placement p, nn::NormType n, double dropout) {
  nn::LayerConfig c;
  c.d_model = kD;
  c.heads = kHeads;
  c.d_ff = kFF;
  c.activation = nn::Activation::gelu;
  c.placement = p;
  c.norm.type = n;
  c.alpha = p == nn::Placement::deepnorm ? nn::deepnorm_constants(nn::StackKind::encoder_only, 2, 0).alpha : 1.0;
  c.dropout = dropout;
  c.attn_dropout = dropout;
  return c;
}

// Norm weights and biases away from 1 and 0 and ReZero's a away from 0, so that every parameter
// has a gradient worth checking.
void perturb(const nn::ParameterList<double>& params, uint64_t seed) {
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].name;
    auto& v = params[i].param->value;
    if (name.find("rezero") != std::string::npos) {
      v[0] = 0.7;
    } else if (name.find("norm") != std::string::npos) {
      const auto r = nn_test::random_vector(v.size(), seed + i, 0.3);
      for (size_t k = 0; k < v.size(); ++k) v[k] += r[k];
    }
  }
}

using Case = std::tuple<nn::Placement, nn::NormType>;

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(nn::placement_name(std::get<0>(info.param))) + "_" +
         std::string(nn::norm_type_name(std::get<1>(info.param)));
}

class StackCase : public ::testing::TestWithParam<Case> {};

TEST_P(StackCase, EncoderStackMatchesFiniteDifferences) {
  const auto [p, n] = GetParam();
  const nn::LayerConfig config = small_config(p, n, 0.1);
  nn::EncoderStack<double> enc(config, 2, 17);
  nn::ParameterList<double> params;
  enc.parameters(params, "");
  perturb(params, 100);
  const int64_t rows = kBatch * kT;
  auto x = nn_test::random_vector(rows * kD, 3);
  const auto r = nn_test::random_vector(rows * kD, 4);
  const std::vector<uint8_t> valid{1, 1, 1, 1, 1, 0};  // the last token of sequence 1 is padding
  std::vector<double> y(rows * kD), dx(rows * kD);
  const nn::Mode mode{true, 5};
  auto loss = [&] {
    enc.forward(View2D<double>(y.data(), rows, kD), View2D<const double>(x.data(), rows, kD), kBatch, valid, false,
                mode);
    return nn_test::dot(y, r);
  };
  loss();
  nn::zero_grad(params);
  enc.backward(View2D<double>(dx.data(), rows, kD), View2D<const double>(r.data(), rows, kD),
               View2D<const double>(x.data(), rows, kD));
  EXPECT_LT(nn_test::fd_error(x, dx, loss), 1e-4);
  nn_test::expect_params_fd(params, loss, 1e-4, "encoder", 6);
}

TEST_P(StackCase, CausalEncoderStackIsGptStyle) {
  // Decoder-only (GPT) blocks are encoder layers with a causal mask: the output at position t does
  // not depend on inputs after t.
  const auto [p, n] = GetParam();
  if (n == nn::NormType::batch) GTEST_SKIP() << "batch statistics mix positions by design";
  nn::EncoderStack<double> enc(small_config(p, n, 0.0), 2, 18);
  nn::ParameterList<double> params;
  enc.parameters(params, "");
  perturb(params, 200);
  const int64_t rows = kBatch * kT;
  auto x = nn_test::random_vector(rows * kD, 6);
  std::vector<double> y1(rows * kD), y2(rows * kD);
  enc.forward(View2D<double>(y1.data(), rows, kD), View2D<const double>(x.data(), rows, kD), kBatch, {}, true, {});
  for (int64_t c = 0; c < kD; ++c) x[(kT - 1) * kD + c] += 1.0;  // change the last token of sequence 0
  enc.forward(View2D<double>(y2.data(), rows, kD), View2D<const double>(x.data(), rows, kD), kBatch, {}, true, {});
  for (int64_t i = 0; i < (kT - 1) * kD; ++i) EXPECT_NEAR(y1[i], y2[i], 1e-14);
}

TEST_P(StackCase, EncoderDecoderMatchesFiniteDifferences) {
  const auto [p, n] = GetParam();
  nn::LayerConfig config = small_config(p, n, 0.1);
  nn::EncoderStack<double> enc(config, 2, 21);
  nn::DecoderStack<double> dec(config, 2, 22);
  nn::ParameterList<double> params;
  enc.parameters(params, "encoder.");
  dec.parameters(params, "decoder.");
  perturb(params, 300);
  const int64_t rows = kBatch * kT, mrows = kBatch * kS;
  auto src = nn_test::random_vector(mrows * kD, 7);
  auto tgt = nn_test::random_vector(rows * kD, 8);
  const auto r = nn_test::random_vector(rows * kD, 9);
  const std::vector<uint8_t> src_valid{1, 1, 1, 1, 1, 1, 0, 0}, tgt_valid{1, 1, 1, 1, 1, 0};
  std::vector<double> mem(mrows * kD), y(rows * kD), dtgt(rows * kD), dmem(mrows * kD), dsrc(mrows * kD);
  const nn::Mode mode{true, 11};
  auto loss = [&] {
    enc.forward(View2D<double>(mem.data(), mrows, kD), View2D<const double>(src.data(), mrows, kD), kBatch, src_valid,
                false, mode);
    dec.forward(View2D<double>(y.data(), rows, kD), View2D<const double>(tgt.data(), rows, kD),
                View2D<const double>(mem.data(), mrows, kD), kBatch, tgt_valid, src_valid, true, mode);
    return nn_test::dot(y, r);
  };
  loss();
  nn::zero_grad(params);
  dmem.assign(dmem.size(), 0.0);
  dec.backward(View2D<double>(dtgt.data(), rows, kD), View2D<double>(dmem.data(), mrows, kD),
               View2D<const double>(r.data(), rows, kD), View2D<const double>(tgt.data(), rows, kD),
               View2D<const double>(mem.data(), mrows, kD));
  enc.backward(View2D<double>(dsrc.data(), mrows, kD), View2D<const double>(dmem.data(), mrows, kD),
               View2D<const double>(src.data(), mrows, kD));
  EXPECT_LT(nn_test::fd_error(tgt, dtgt, loss), 1e-4);
  EXPECT_LT(nn_test::fd_error(src, dsrc, loss), 1e-4);
  nn_test::expect_params_fd(params, loss, 1e-4, "encoder-decoder", 4);
}

INSTANTIATE_TEST_SUITE_P(
    PlacementsByNorms, StackCase,
    ::testing::Combine(::testing::Values(nn::Placement::post, nn::Placement::pre, nn::Placement::sandwich,
                                         nn::Placement::deepnorm, nn::Placement::rezero, nn::Placement::none),
                       ::testing::Values(nn::NormType::layer, nn::NormType::rms, nn::NormType::batch,
                                         nn::NormType::scale, nn::NormType::none)),
    case_name);

TEST(Layers, NoResidualMatchesFiniteDifferences) {
  for (const auto p : {nn::Placement::post, nn::Placement::pre, nn::Placement::deepnorm, nn::Placement::rezero}) {
    nn::LayerConfig config = small_config(p, nn::NormType::layer, 0.0);
    config.residual = false;
    nn::EncoderStack<double> enc(config, 2, 31);
    nn::ParameterList<double> params;
    enc.parameters(params, "");
    perturb(params, 400);
    const int64_t rows = kBatch * kT;
    auto x = nn_test::random_vector(rows * kD, 12);
    const auto r = nn_test::random_vector(rows * kD, 13);
    std::vector<double> y(rows * kD), dx(rows * kD);
    auto loss = [&] {
      enc.forward(View2D<double>(y.data(), rows, kD), View2D<const double>(x.data(), rows, kD), kBatch, {}, false, {});
      return nn_test::dot(y, r);
    };
    loss();
    nn::zero_grad(params);
    enc.backward(View2D<double>(dx.data(), rows, kD), View2D<const double>(r.data(), rows, kD),
                 View2D<const double>(x.data(), rows, kD));
    EXPECT_LT(nn_test::fd_error(x, dx, loss), 1e-4) << nn::placement_name(p);
    nn_test::expect_params_fd(params, loss, 1e-4, std::string("no residual ") + std::string(nn::placement_name(p)), 4);
  }
}

TEST(Layers, FusedAndComposedAddNormAgree) {
  for (const auto p : {nn::Placement::post, nn::Placement::deepnorm, nn::Placement::rezero}) {
    for (const auto n : {nn::NormType::layer, nn::NormType::rms}) {
      std::vector<std::vector<double>> outs, grads;
      for (const bool fused : {true, false}) {
        nn::LayerConfig config = small_config(p, n, 0.2);
        config.fused = fused;
        nn::EncoderLayer<double> layer(config, 41);
        nn::ParameterList<double> params;
        layer.parameters(params, "");
        perturb(params, 500);
        const int64_t rows = kBatch * kT;
        const auto x = nn_test::random_vector(rows * kD, 14);
        const auto r = nn_test::random_vector(rows * kD, 15);
        std::vector<double> y(rows * kD), dx(rows * kD);
        layer.forward(View2D<double>(y.data(), rows, kD), View2D<const double>(x.data(), rows, kD), kBatch, {}, false,
                      nn::Mode{true, 3});
        layer.backward(View2D<double>(dx.data(), rows, kD), View2D<const double>(r.data(), rows, kD),
                       View2D<const double>(x.data(), rows, kD));
        outs.push_back(y);
        std::vector<double> g = dx;
        for (const auto& e : params) g.insert(g.end(), e.param->grad.begin(), e.param->grad.end());
        grads.push_back(g);
      }
      for (size_t i = 0; i < outs[0].size(); ++i) EXPECT_NEAR(outs[0][i], outs[1][i], 1e-12);
      ASSERT_EQ(grads[0].size(), grads[1].size());
      for (size_t i = 0; i < grads[0].size(); ++i)
        EXPECT_NEAR(grads[0][i], grads[1][i], 1e-11 * (1 + std::abs(grads[1][i])))
            << nn::placement_name(p) << " " << nn::norm_type_name(n) << " element " << i;
    }
  }
}

TEST(Layers, ParameterNamesAndDeepNormConstants) {
  nn::DecoderLayer<float> dec(small_config(nn::Placement::sandwich, nn::NormType::layer, 0.0), 1);
  nn::ParameterList<float> params;
  dec.parameters(params, "dec.");
  std::vector<std::string> names;
  for (const auto& e : params) names.push_back(e.name);
  EXPECT_EQ(names.front(), "dec.self_attn.q_proj.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "dec.cross_attn.out_proj.bias"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "dec.norm3_out.bias"), names.end());
  // 3 boxes x 2 norms x (weight + bias) x d
  int64_t norm_params = 0;
  for (const auto& e : params)
    if (e.name.find("norm") != std::string::npos) norm_params += e.param->numel();
  EXPECT_EQ(norm_params, 3 * 2 * 2 * kD);
  const auto enc = nn::deepnorm_constants(nn::StackKind::encoder_only, 18, 0);
  EXPECT_NEAR(enc.alpha, std::pow(36.0, 0.25), 1e-15);
  EXPECT_NEAR(enc.beta, std::pow(144.0, -0.25), 1e-15);
  const auto e6 = nn::deepnorm_constants(nn::StackKind::encoder_of_encdec, 6, 6);
  EXPECT_NEAR(e6.alpha, 0.81 * std::pow(6.0 * 6 * 6 * 6 * 6, 1.0 / 16), 1e-15);
  EXPECT_THROW(nn::parse_placement("middle"), addnorm::Error);
  EXPECT_EQ(nn::parse_placement("peri"), nn::Placement::sandwich);
}

}  // namespace
