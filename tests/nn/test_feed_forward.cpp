// nn: activations, feed-forward network, embeddings and positional encodings.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "addnorm/nn/activation.hpp"
#include "addnorm/nn/embedding.hpp"
#include "addnorm/nn/feed_forward.hpp"
#include "gradcheck.hpp"

namespace {

using addnorm::DropoutSpec;
using addnorm::View2D;
namespace nn = addnorm::nn;

TEST(Activation, KnownValues) {
  // torch.nn.functional.gelu(torch.tensor([-1., 0.5, 1., 3.], dtype=torch.float64)) and approximate='tanh'.
  std::vector<double> x{-1.0, 0.5, 1.0, 3.0}, y(4);
  nn::activation_forward<double>(y, x, nn::Activation::gelu);
  EXPECT_NEAR(y[0], -0.15865525393145702, 1e-15);
  EXPECT_NEAR(y[1], 0.34573123063700656, 1e-15);
  EXPECT_NEAR(y[2], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(y[3], 2.99595030590511, 1e-14);
  nn::activation_forward<double>(y, x, nn::Activation::gelu_tanh);
  EXPECT_NEAR(y[0], -0.15880800939172324, 1e-15);
  EXPECT_NEAR(y[2], 0.8411919906082768, 1e-15);
  nn::activation_forward<double>(y, x, nn::Activation::relu);
  EXPECT_EQ(y, (std::vector<double>{0.0, 0.5, 1.0, 3.0}));
  EXPECT_EQ(nn::parse_activation("gelu_tanh"), nn::Activation::gelu_tanh);
  EXPECT_THROW(nn::parse_activation("swish"), addnorm::Error);
}

TEST(Activation, BackwardMatchesFiniteDifferences) {
  for (const auto a : {nn::Activation::relu, nn::Activation::gelu, nn::Activation::gelu_tanh}) {
    auto x = nn_test::random_vector(40, 3, 3.0);
    const auto r = nn_test::random_vector(40, 4);
    std::vector<double> y(40), dx(40);
    auto loss = [&] {
      nn::activation_forward<double>(y, x, a);
      return nn_test::dot(y, r);
    };
    nn::activation_backward<double>(dx, r, x, a);
    EXPECT_LT(nn_test::fd_error(x, dx, loss), 1e-6) << nn::activation_name(a);
  }
}

TEST(FeedForward, BackwardMatchesFiniteDifferences) {
  for (const auto a : {nn::Activation::relu, nn::Activation::gelu, nn::Activation::gelu_tanh}) {
    for (const double p : {0.0, 0.25}) {
      const int64_t rows = 5, d = 6, dff = 10;
      nn::FeedForward<double> ffn({d, dff, a, true}, 9);
      auto x = nn_test::random_vector(rows * d, 31);
      const auto r = nn_test::random_vector(rows * d, 32);
      std::vector<double> y(rows * d), dx(rows * d);
      const DropoutSpec drop{p, 5, 0};
      auto loss = [&] {
        ffn.forward(View2D<double>(y.data(), rows, d), View2D<const double>(x.data(), rows, d), drop);
        return nn_test::dot(y, r);
      };
      nn::ParameterList<double> params;
      ffn.parameters(params, "ffn.");
      ASSERT_EQ(params.size(), 4u);
      EXPECT_EQ(params[0].name, "ffn.linear1.weight");
      nn::zero_grad(params);
      loss();
      ffn.backward(View2D<double>(dx.data(), rows, d), View2D<const double>(r.data(), rows, d),
                   View2D<const double>(x.data(), rows, d));
      const std::string what = std::string(nn::activation_name(a)) + " p=" + std::to_string(p);
      EXPECT_LT(nn_test::fd_error(x, dx, loss), 1e-5) << what;
      nn_test::expect_params_fd(params, loss, 1e-5, what);
    }
  }
}

TEST(Embedding, ForwardGathersAndBackwardScatters) {
  nn::Embedding<double> emb(7, 4, 1);
  const std::vector<int64_t> ids{3, 0, 3, 6};
  std::vector<double> y(16);
  emb.forward(View2D<double>(y.data(), 4, 4), ids, 2.0);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(y[c], 2.0 * emb.weight.value[3 * 4 + c]);
    EXPECT_EQ(y[12 + c], 2.0 * emb.weight.value[6 * 4 + c]);
  }
  auto w = emb.weight.value;
  const auto r = nn_test::random_vector(16, 2);
  emb.backward(View2D<const double>(r.data(), 4, 4), ids, 2.0);
  auto loss = [&] {
    emb.forward(View2D<double>(y.data(), 4, 4), ids, 2.0);
    return nn_test::dot(y, r);
  };
  nn::ParameterList<double> params;
  emb.parameters(params, "tok.");
  nn_test::expect_params_fd(params, loss, 1e-8, "embedding", 64);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(emb.weight.grad[1 * 4 + c], 0.0);  // token 1 unused
  const std::vector<int64_t> bad{7};
  EXPECT_THROW(emb.forward(View2D<double>(y.data(), 1, 4), bad), addnorm::Error);
}

TEST(Positions, SinusoidalValues) {
  std::vector<double> y(2 * 3 * 4, 0.0);  // batch 2, seq 3, d 4
  nn::add_sinusoidal_positions<double>(View2D<double>(y.data(), 6, 4), 3);
  // pos 2: sin(2), cos(2), sin(2 / 100), cos(2 / 100); row 5 is position 2 of sequence 1.
  EXPECT_NEAR(y[5 * 4 + 0], std::sin(2.0), 1e-15);
  EXPECT_NEAR(y[5 * 4 + 1], std::cos(2.0), 1e-15);
  EXPECT_NEAR(y[5 * 4 + 2], std::sin(0.02), 1e-15);
  EXPECT_NEAR(y[5 * 4 + 3], std::cos(0.02), 1e-15);
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[1], 1.0);
  EXPECT_THROW(nn::add_sinusoidal_positions<double>(View2D<double>(y.data(), 5, 4), 3), addnorm::Error);
}

TEST(Positions, LearnedBackwardMatchesFiniteDifferences) {
  nn::LearnedPositions<double> pos(8, 3, 4);
  const int64_t batch = 2, seq = 3, offset = 2;
  const auto x = nn_test::random_vector(batch * seq * 3, 5);
  const auto r = nn_test::random_vector(batch * seq * 3, 6);
  std::vector<double> y;
  auto loss = [&] {
    y = x;
    pos.forward(View2D<double>(y.data(), batch * seq, 3), seq, offset);
    return nn_test::dot(y, r);
  };
  pos.backward(View2D<const double>(r.data(), batch * seq, 3), seq, offset);
  nn::ParameterList<double> params;
  pos.parameters(params, "pos.");
  nn_test::expect_params_fd(params, loss, 1e-8, "learned positions", 64);
  EXPECT_THROW(pos.forward(View2D<double>(y.data(), batch * seq, 3), seq, 6), addnorm::Error);
}

}  // namespace
