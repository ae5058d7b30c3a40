// nn: cross-entropy with label smoothing and ignored targets: values and gradients against
// PyTorch 1.13's torch.nn.functional.cross_entropy (reference values from torch_reference.py),
// finite differences, stability for huge logits, f32 against f64, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/loss.hpp"
#include "gradcheck.hpp"

namespace {

using addnorm::View2D;
namespace nn = addnorm::nn;

constexpr int64_t kR = 5, kV = 7;

// z_rj = 3 sin(0.7 r + 1.3 j + 0.1), as in torch_reference.py
template <class T = double>
std::vector<T> logits() {
  std::vector<T> z(kR * kV);
  for (int64_t r = 0; r < kR; ++r)
    for (int64_t j = 0; j < kV; ++j)
      z[static_cast<size_t>(r * kV + j)] = static_cast<T>(3 * std::sin(0.7 * static_cast<double>(r) + 1.3 * static_cast<double>(j) + 0.1));
  return z;
}

struct TorchCase {
  std::string name;
  std::vector<int64_t> targets;
  double smoothing;
  int64_t ignore;
  double loss;
  std::vector<double> grad;
};

std::vector<TorchCase> torch_cases() {
  return {
      {"smooth0.1_ignore-100", {2, -100, 6, 0, 3}, 0.1, -100, 2.3542089172039651,
       {0.0036150387570478117, 0.098845156162948547, -0.20937279495819278, -0.0030213576252932899, -0.0031328002430287441, 0.0099912739054859312, 0.1030754840010325, 0, 0, 0, 0, 0, 0, 0, 0.1021806575788869, 0.010920285396185822, -0.0031158644260450693, -0.0030492161715595656, 0.014299268690042945, 0.099630477749568028, -0.22086560881707909, -0.14689502806392934, -0.0010497463925254154, -0.0032076529162578158, 0.00061056632394300989, 0.10348972293708178, 0.049211276598215545, -0.0021591384865277587, 0.016039289736164957, -0.0028712354090062397, -0.0024191892271294164, -0.1864452934433837, 0.1719915295111035, 0.0067338325973812429, -0.0030289337651303056}},
      {"smooth0_ignore0", {2, 0, 6, 0, 3}, 0.0, 0, 2.6089664841542866,
       {0.0095819564379685113, 0.13655544631250283, -0.30773515518235228, 0.00073342792818037602, 0.00058483777119977, 0.018083603302552671, 0.1421958834299481, 0, 0, 0, 0, 0, 0, 0, 0.14100278153375398, 0.019322285290152525, 0.00060741886051133664, 0.0006962831998253414, 0.023827596348628691, 0.1376025417613288, -0.32305890699420065, 0, 0, 0, 0, 0, 0, 0, 0.026147624410124706, 0.00093359088322977598, 0.0015363191257322067, -0.27716515316260681, 0.23408394411004274, 0.013740348225079753, 0.00072332640839768789}},
      {"smooth0.3_ignore-100", {1, 4, 6, 0, 3}, 0.3, -100, 2.6731282559688001,
       {-0.0028222547086474651, -0.066638160783926842, 0.0067874783191600599, -0.0081313718145203471, -0.0082205259087087101, 0.0022787334101030303, 0.076746101486540291, 0.029874334558258612, 0.050978096795596867, -0.0064951919892130552, -0.008348875469878083, -0.14663869814683861, 0.048739428724839814, 0.031890905527234448, 0.076030240348823802, 0.0030219426026629414, -0.0082069772551217699, -0.0081536586515333666, 0.0057251292377486409, 0.073990096485368695, -0.14240677276794897, -0.083230308165429173, -0.0065540828283060472, -0.0082804080472919667, -0.0052258326551313065, 0.077077492635379719, 0.033654735564286727, -0.007441596503507922, 0.0071171460746462505, -0.0080112740414907055, -0.0076496370959892477, -0.11487052046899267, 0.13187893789459706, -0.00032721963638072081, -0.0081374327263899586}},
  };
}

TEST(CrossEntropy, MatchesTorchInF64) {
  const auto z = logits();
  std::vector<double> dz(z.size());
  for (const auto& c : torch_cases()) {
    nn::CrossEntropy<double> ce({c.smoothing, c.ignore});
    const double loss = ce.forward(View2D<const double>(z.data(), kR, kV), c.targets);
    EXPECT_NEAR(loss, c.loss, 1e-14 * std::abs(c.loss)) << c.name;
    ce.backward(View2D<double>(dz.data(), kR, kV), View2D<const double>(z.data(), kR, kV));
    for (size_t i = 0; i < dz.size(); ++i) EXPECT_NEAR(dz[i], c.grad[i], 1e-15) << c.name << " element " << i;
  }
}

TEST(CrossEntropy, F32AgreesWithTorch) {
  const auto z = logits<float>();
  std::vector<float> dz(z.size());
  for (const auto& c : torch_cases()) {
    nn::CrossEntropy<float> ce({c.smoothing, c.ignore});
    const double loss = ce.forward(View2D<const float>(z.data(), kR, kV), c.targets);
    EXPECT_NEAR(loss, c.loss, 1e-6 * std::abs(c.loss)) << c.name;
    ce.backward(View2D<float>(dz.data(), kR, kV), View2D<const float>(z.data(), kR, kV));
    for (size_t i = 0; i < dz.size(); ++i) EXPECT_NEAR(dz[i], c.grad[i], 1e-7) << c.name << " element " << i;
  }
}

TEST(CrossEntropy, BackwardInPlaceAndScaled) {
  auto z = logits();
  const auto c = torch_cases()[0];
  nn::CrossEntropy<double> ce({c.smoothing, c.ignore});
  ce.forward(View2D<const double>(z.data(), kR, kV), c.targets);
  ce.backward(View2D<double>(z.data(), kR, kV), View2D<const double>(z.data(), kR, kV), 2.5);
  for (size_t i = 0; i < z.size(); ++i) EXPECT_NEAR(z[i], 2.5 * c.grad[i], 1e-15) << i;
}

TEST(CrossEntropy, MatchesFiniteDifferences) {
  for (const double smoothing : {0.0, 0.1, 1.0}) {
    auto z = nn_test::random_vector(kR * kV, 9, 4.0);
    const std::vector<int64_t> targets{3, -1, 0, 6, 6};
    nn::CrossEntropy<double> ce({smoothing, -1});
    auto loss = [&] { return ce.forward(View2D<const double>(z.data(), kR, kV), targets); };
    loss();
    std::vector<double> dz(z.size());
    ce.backward(View2D<double>(dz.data(), kR, kV), View2D<const double>(z.data(), kR, kV));
    EXPECT_LT(nn_test::fd_error(z, dz, loss, 64), 1e-6) << "smoothing " << smoothing;
  }
}

// A constant added to a row changes neither loss nor gradient; 1e4 (exp overflows) and -1e4
// (exp underflows) give the same values as the unshifted row.
TEST(CrossEntropy, StableForHugeLogits) {
  const auto z = logits();
  const auto c = torch_cases()[2];
  for (const double shift : {1e4, -1e4, 1e30}) {
    auto zs = z;
    for (auto& v : zs) v += shift;
    nn::CrossEntropy<double> ce({c.smoothing, c.ignore});
    const double loss = ce.forward(View2D<const double>(zs.data(), kR, kV), c.targets);
    if (shift < 1e10) {
      EXPECT_NEAR(loss, c.loss, 1e-11) << shift;
    } else {
      EXPECT_TRUE(std::isfinite(loss)) << shift;
    }
    std::vector<double> dz(z.size());
    ce.backward(View2D<double>(dz.data(), kR, kV), View2D<const double>(zs.data(), kR, kV));
    for (size_t i = 0; i < dz.size(); ++i) EXPECT_TRUE(std::isfinite(dz[i])) << shift;
    if (shift < 1e10) {
      for (size_t i = 0; i < dz.size(); ++i) EXPECT_NEAR(dz[i], c.grad[i], 1e-11) << shift << " element " << i;
    }
  }
  std::vector<float> zf(z.begin(), z.end());
  for (auto& v : zf) v += 1e4f;  // f32: loss stays finite and near the unshifted value
  nn::CrossEntropy<float> cf({c.smoothing, c.ignore});
  EXPECT_NEAR(cf.forward(View2D<const float>(zf.data(), kR, kV), c.targets), c.loss, 5e-3);
}

TEST(CrossEntropy, AllIgnoredGivesZero) {
  const auto z = logits();
  nn::CrossEntropy<double> ce({0.1, -100});
  const std::vector<int64_t> targets(kR, -100);
  EXPECT_EQ(ce.forward(View2D<const double>(z.data(), kR, kV), targets), 0.0);
  EXPECT_EQ(ce.counted(), 0);
  std::vector<double> dz(z.size(), 1.0);
  ce.backward(View2D<double>(dz.data(), kR, kV), View2D<const double>(z.data(), kR, kV));
  for (const double v : dz) EXPECT_EQ(v, 0.0);
}

TEST(CrossEntropy, Errors) {
  const auto z = logits();
  const View2D<const double> zv(z.data(), kR, kV);
  EXPECT_THROW(nn::CrossEntropy<double>({1.5, -100}), addnorm::Error);
  nn::CrossEntropy<double> ce;
  try {
    ce.forward(zv, std::vector<int64_t>{0, 1, 7, 2, 3});
    FAIL() << "no error for target 7";
  } catch (const addnorm::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[CrossEntropy::forward] target 7 at row 2", 0), 0u) << e.what();
  }
  EXPECT_THROW(ce.forward(zv, std::vector<int64_t>{0, 1}), addnorm::Error);
  ce.forward(zv, std::vector<int64_t>{0, 1, 2, 3, 4});
  std::vector<double> dz(static_cast<size_t>(kV));
  EXPECT_THROW(ce.backward(View2D<double>(dz.data(), 1, kV), zv), addnorm::Error);
}

}  // namespace
