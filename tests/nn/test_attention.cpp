// nn: stable softmax, dropout and multi-head attention; backward against finite differences (f64).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "addnorm/nn/attention.hpp"
#include "addnorm/nn/dropout.hpp"
#include "addnorm/nn/softmax.hpp"
#include "gradcheck.hpp"

namespace {

using addnorm::DropoutSpec;
using addnorm::View2D;
namespace nn = addnorm::nn;

TEST(Softmax, LargeScoresDoNotOverflow) {
  // The seeds' exp(s) / sum(exp(s)) is NaN here: exp(1000) = inf.
  std::vector<float> s{1000.0f, 1001.0f, 999.0f, -1e30f};
  std::vector<float> p(4);
  nn::softmax_forward<float>(View2D<float>(p.data(), 1, 4), View2D<const float>(s.data(), 1, 4));
  const double e0 = std::exp(-1.0), e2 = std::exp(-2.0), z = 1 + e0 + e2;
  EXPECT_NEAR(p[0], e0 / z, 1e-7);
  EXPECT_NEAR(p[1], 1 / z, 1e-7);
  EXPECT_NEAR(p[2], e2 / z, 1e-7);
  EXPECT_EQ(p[3], 0.0f);
}

TEST(Softmax, MaskedRowsAndNaN) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x{-inf, -inf, -inf, 1.0, -inf, 1.0, 2.0, std::nan(""), 0.0};
  nn::softmax_forward<double>(View2D<double>(x.data(), 3, 3), View2D<const double>(x.data(), 3, 3));
  EXPECT_EQ(x[0] + x[1] + x[2], 0.0);  // every entry masked: zeros, not NaN
  EXPECT_DOUBLE_EQ(x[3], 0.5);
  EXPECT_EQ(x[4], 0.0);
  EXPECT_TRUE(std::isnan(x[6]) && std::isnan(x[7]) && std::isnan(x[8]));
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, n = 5;
  auto x = nn_test::random_vector(rows * n, 1, 3.0);
  const auto r = nn_test::random_vector(rows * n, 2);
  std::vector<double> y(rows * n), dx(rows * n);
  auto loss = [&] {
    nn::softmax_forward<double>(View2D<double>(y.data(), rows, n), View2D<const double>(x.data(), rows, n));
    return nn_test::dot(y, r);
  };
  loss();
  nn::softmax_backward<double>(View2D<double>(dx.data(), rows, n), View2D<const double>(r.data(), rows, n),
                               View2D<const double>(y.data(), rows, n));
  EXPECT_LT(nn_test::fd_error(x, dx, loss), 1e-8);
}

TEST(Dropout, MaskIsRegeneratedAndScaled) {
  const int64_t rows = 50, cols = 40;
  std::vector<double> x(rows * cols, 1.0), y(rows * cols), dx(rows * cols);
  const DropoutSpec spec{0.25, 1234, 77};
  nn::dropout_forward<double>(View2D<double>(y.data(), rows, cols), View2D<const double>(x.data(), rows, cols), spec);
  nn::dropout_backward<double>(View2D<double>(dx.data(), rows, cols), View2D<const double>(x.data(), rows, cols),
                               spec);
  int64_t kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_TRUE(y[i] == 0.0 || y[i] == 1.0 / 0.75);
    EXPECT_EQ(y[i], dx[i]);
    EXPECT_EQ(y[i] != 0.0, spec.keep(i));
    kept += y[i] != 0.0 ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(rows * cols), 0.75, 0.03);
  EXPECT_THROW(nn::dropout_forward<double>(View2D<double>(y.data(), rows, cols),
                                           View2D<const double>(x.data(), rows, cols), DropoutSpec{1.5, 0, 0}),
               addnorm::Error);
}

struct AttnCase {
  int64_t batch, tq, tk, d, heads;
  bool self, causal, padding;
  double dropout;
};

std::string describe(const AttnCase& c) {
  return "batch=" + std::to_string(c.batch) + " tq=" + std::to_string(c.tq) + " tk=" + std::to_string(c.tk) +
         " d=" + std::to_string(c.d) + " heads=" + std::to_string(c.heads) + " self=" + std::to_string(c.self) +
         " causal=" + std::to_string(c.causal) + " padding=" + std::to_string(c.padding) +
         " dropout=" + std::to_string(c.dropout);
}

// The attention of one (b, h) written out with loops in double, as the check of the fast path.
std::vector<double> attention_by_loops(const nn::MultiHeadAttention<double>& m, const std::vector<double>& xq,
                                       const std::vector<double>& xkv, const AttnCase& c,
                                       const std::vector<uint8_t>& valid) {
  const int64_t d = c.d, dh = d / c.heads;
  auto proj = [&](const nn::Linear<double>& l, const std::vector<double>& x, int64_t rows) {
    std::vector<double> y(rows * d);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < d; ++j) {
        double s = l.bias.value[j];
        for (int64_t i = 0; i < d; ++i) s += x[r * d + i] * l.weight.value[j * d + i];
        y[r * d + j] = s;
      }
    return y;
  };
  const auto q = proj(m.q_proj, xq, c.batch * c.tq), k = proj(m.k_proj, xkv, c.batch * c.tk),
             v = proj(m.v_proj, xkv, c.batch * c.tk);
  std::vector<double> ctx(c.batch * c.tq * d);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.tq; ++i) {
        std::vector<double> s(c.tk);
        double mx = -1e300;
        for (int64_t j = 0; j < c.tk; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < dh; ++e) dot += q[(b * c.tq + i) * d + h * dh + e] * k[(b * c.tk + j) * d + h * dh + e];
          s[j] = dot / std::sqrt(static_cast<double>(dh));
          const bool masked = (c.causal && j > i + c.tk - c.tq) || (!valid.empty() && valid[b * c.tk + j] == 0);
          if (masked) s[j] = -1e300;
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < c.tk; ++j) z += s[j] <= -1e300 ? 0.0 : std::exp(s[j] - mx);
        for (int64_t j = 0; j < c.tk; ++j) {
          const double p = s[j] <= -1e300 ? 0.0 : std::exp(s[j] - mx) / z;
          for (int64_t e = 0; e < dh; ++e) ctx[(b * c.tq + i) * d + h * dh + e] += p * v[(b * c.tk + j) * d + h * dh + e];
        }
      }
  return proj(m.out_proj, ctx, c.batch * c.tq);
}

class AttentionCase : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionCase, ForwardMatchesLoopsAndBackwardMatchesFiniteDifferences) {
  const AttnCase c = GetParam();
  SCOPED_TRACE(describe(c));
  nn::MultiHeadAttention<double> m({c.d, c.heads, true}, 5);
  for (nn::Linear<double>* l : {&m.q_proj, &m.k_proj, &m.v_proj, &m.out_proj})  // nonzero biases
    addnorm::nn::init_uniform<double>(l->bias.value, -0.5, 0.5, 99 + static_cast<uint64_t>(l - &m.q_proj));
  const int64_t rq = c.batch * c.tq, rk = c.batch * c.tk;
  auto xq = nn_test::random_vector(rq * c.d, 21);
  auto xkv = c.self ? xq : nn_test::random_vector(rk * c.d, 22);
  std::vector<uint8_t> valid;
  if (c.padding) {
    valid.assign(rk, 1);
    for (int64_t b = 0; b < c.batch; ++b) valid[b * c.tk + c.tk - 1 - b % c.tk] = 0;  // one padded key per batch
  }
  const DropoutSpec drop{c.dropout, 7, 3};
  const auto r = nn_test::random_vector(rq * c.d, 23);
  std::vector<double> y(rq * c.d), dxq(rq * c.d), dxkv(rk * c.d);
  auto loss = [&] {
    if (c.self) xkv = xq;
    m.forward(View2D<double>(y.data(), rq, c.d), View2D<const double>(xq.data(), rq, c.d),
              View2D<const double>(xkv.data(), rk, c.d), c.batch, c.causal, valid, drop);
    return nn_test::dot(y, r);
  };
  loss();
  if (c.dropout == 0) {
    const auto want = attention_by_loops(m, xq, xkv, c, valid);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-12);
  }
  nn::ParameterList<double> params;
  m.parameters(params, "attn.");
  ASSERT_EQ(params.size(), 8u);
  nn::zero_grad(params);
  if (c.self) {
    m.backward(View2D<double>(dxq.data(), rq, c.d), View2D<double>(dxq.data(), rq, c.d),
               View2D<const double>(r.data(), rq, c.d), View2D<const double>(xq.data(), rq, c.d),
               View2D<const double>(xkv.data(), rk, c.d), true);
  } else {
    m.backward(View2D<double>(dxq.data(), rq, c.d), View2D<double>(dxkv.data(), rk, c.d),
               View2D<const double>(r.data(), rq, c.d), View2D<const double>(xq.data(), rq, c.d),
               View2D<const double>(xkv.data(), rk, c.d), false);
    EXPECT_LT(nn_test::fd_error(xkv, dxkv, loss), 1e-5);
  }
  EXPECT_LT(nn_test::fd_error(xq, dxq, loss), 1e-5);
  nn_test::expect_params_fd(params, loss, 1e-5, describe(c));
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCase,
                         ::testing::Values(AttnCase{2, 4, 4, 8, 2, true, false, false, 0.0},
                                           AttnCase{2, 5, 5, 6, 3, true, true, false, 0.0},
                                           AttnCase{3, 4, 4, 8, 4, true, true, true, 0.0},
                                           AttnCase{2, 3, 6, 8, 2, false, false, true, 0.0},
                                           AttnCase{1, 1, 1, 4, 1, true, true, false, 0.0},
                                           AttnCase{2, 4, 4, 8, 2, true, true, true, 0.3},
                                           AttnCase{2, 3, 5, 6, 1, false, false, false, 0.2}));

TEST(Attention, LargeScoresStayFinite) {
  // Scores of order 1e4: the naive softmax overflows in float.
  nn::MultiHeadAttention<float> m({4, 1, false}, 1);
  for (auto* l : {&m.q_proj, &m.k_proj}) l->weight.value.assign(16, 0.0f);
  for (int i = 0; i < 4; ++i) m.q_proj.weight.value[i * 5] = m.k_proj.weight.value[i * 5] = 100.0f;
  std::vector<float> x{1, 2, 3, 4, 4, 3, 2, 1}, y(8);
  m.forward(View2D<float>(y.data(), 2, 4), View2D<const float>(x.data(), 2, 4), View2D<const float>(x.data(), 2, 4),
            1, false, {}, {});
  for (const float v : y) EXPECT_TRUE(std::isfinite(v));
  for (const float p : m.probabilities()) EXPECT_TRUE(p == 0.0f || p == 1.0f);
}

TEST(Attention, Errors) {
  EXPECT_THROW(nn::MultiHeadAttention<float>({6, 4, true}, 1), addnorm::Error);
  nn::MultiHeadAttention<float> m({4, 2, true}, 1);
  std::vector<float> x(24), y(24);
  try {
    m.forward(View2D<float>(y.data(), 6, 4), View2D<const float>(x.data(), 6, 4), View2D<const float>(x.data(), 6, 4),
              4, false, {}, {});
    FAIL() << "no throw";
  } catch (const addnorm::Error& e) {
    EXPECT_EQ(std::string(e.what()), "[MultiHeadAttention::forward] rows 6 and 6 are not multiples of batch 4");
  }
  std::vector<uint8_t> valid(5, 1);
  EXPECT_THROW(m.forward(View2D<float>(y.data(), 6, 4), View2D<const float>(x.data(), 6, 4),
                         View2D<const float>(x.data(), 6, 4), 2, false, valid, {}),
               addnorm::Error);
}

}  // namespace
