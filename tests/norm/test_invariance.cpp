// Invariance properties of Ba, Kiros and Hinton (2016), table 1, as property tests on the kernels.
// The summed inputs of a layer are a = X W (X: cases x inputs, W: inputs x hidden units; column j
// of W is unit j's weight vector), and the output is y = Norm(a) * gamma + beta. For each
// transformation of W or X the table says whether y is unchanged:
//
//   transformation                       LayerNorm  BatchNorm  RMSNorm
//   weight matrix re-scaling  W -> d W        yes        yes       yes
//   weight matrix re-centering W -> W + v 1^T yes        no        no    (a -> a + (X v) 1^T)
//   weight vector re-scaling  W_j -> d_j W_j  no         yes       no
//   dataset re-scaling        X -> d X        yes        yes       yes
//   dataset re-centering      X -> X + 1 u^T  no         yes       no    (a -> a + 1 (u^T W))
//   single case re-scaling    X_i -> d_i X_i  yes        no        yes
//
// (LayerNorm and BatchNorm columns as in the paper's table; RMSNorm is invariant to re-scaling
// and not to re-centering, Zhang and Sennrich 2019.) eps is tiny against the variance of a
// (1e-20), so that the invariances hold to rounding; "yes" is checked to a few roundings of T,
// "no" as a change of at least 0.05 somewhere in y.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::View2D;
using addnorm::testing::describe;
using addnorm::testing::dtype_name;
using addnorm::testing::Rng;

constexpr int64_t kCases = 8, kInputs = 6, kUnits = 10;
constexpr double kEps = 1e-20;

enum class Kind { layer, batch, rms };

const char* kind_name(Kind k) { return k == Kind::layer ? "LayerNorm" : k == Kind::batch ? "BatchNorm" : "RMSNorm"; }

using Mat = std::vector<double>;  // packed, row-major

// a = X W in double: (kCases, kInputs) x (kInputs, kUnits).
Mat matmul(const Mat& x, const Mat& w) {
  Mat a(kCases * kUnits, 0.0);
  for (int64_t i = 0; i < kCases; ++i)
    for (int64_t k = 0; k < kInputs; ++k)
      for (int64_t j = 0; j < kUnits; ++j) a[i * kUnits + j] += x[i * kInputs + k] * w[k * kUnits + j];
  return a;
}

// y = Norm(a) * gamma + beta with the kernel of kind k for element type T, as doubles.
template <class T>
std::vector<double> normalize(Kind k, const Mat& a, const std::vector<T>& gamma, const std::vector<T>& beta) {
  std::vector<T> in(a.begin(), a.end()), out(a.size());
  const View2D<const T> x(in.data(), kCases, kUnits);
  const View2D<T> y(out.data(), kCases, kUnits);
  switch (k) {
    case Kind::layer:
      addnorm::layer_norm_forward<T>(y, {}, {}, x, gamma, beta, kEps);
      break;
    case Kind::rms:
      addnorm::rms_norm_forward<T>(y, {}, x, gamma, kEps);
      break;
    case Kind::batch: {
      addnorm::BatchNormOptions opt;
      opt.eps = kEps;
      addnorm::batch_norm_forward<T>(y, {}, {}, {}, {}, x, {}, gamma, beta, opt);
      break;
    }
  }
  return {out.begin(), out.end()};
}

struct Transform {
  std::string name;
  std::function<void(Mat& x, Mat& w, Rng& rng)> apply;
  bool layer, batch, rms;  // invariant?
  [[nodiscard]] bool invariant(Kind k) const { return k == Kind::layer ? layer : k == Kind::batch ? batch : rms; }
};

std::vector<Transform> transforms() {
  std::vector<Transform> t;
  for (double d : {3.7, 0.02})
    t.push_back({describe("weight matrix re-scaling by ", d),
                 [d](Mat&, Mat& w, Rng&) {
                   for (auto& e : w) e *= d;
                 },
                 true, true, true});
  t.push_back({"weight matrix re-centering",
               [](Mat&, Mat& w, Rng& rng) {
                 for (int64_t k = 0; k < kInputs; ++k) {
                   const double v = rng.normal(0.5, 1.0);  // added to every unit's weight for input k
                   for (int64_t j = 0; j < kUnits; ++j) w[k * kUnits + j] += v;
                 }
               },
               true, false, false});
  t.push_back({"weight vector re-scaling",
               [](Mat&, Mat& w, Rng& rng) {
                 for (int64_t j = 0; j < kUnits; ++j) {
                   const double d = rng.uniform(0.2, 5.0);  // unit j's weight vector
                   for (int64_t k = 0; k < kInputs; ++k) w[k * kUnits + j] *= d;
                 }
               },
               false, true, false});
  for (double d : {0.05, 40.0})
    t.push_back({describe("dataset re-scaling by ", d),
                 [d](Mat& x, Mat&, Rng&) {
                   for (auto& e : x) e *= d;
                 },
                 true, true, true});
  t.push_back({"dataset re-centering",
               [](Mat& x, Mat&, Rng& rng) {
                 for (int64_t k = 0; k < kInputs; ++k) {
                   const double u = rng.normal(0.0, 2.0);  // added to input k of every case
                   for (int64_t i = 0; i < kCases; ++i) x[i * kInputs + k] += u;
                 }
               },
               false, true, false});
  t.push_back({"single training case re-scaling",
               [](Mat& x, Mat&, Rng& rng) {
                 for (int64_t i = 0; i < kCases; ++i) {
                   const double d = rng.uniform(0.2, 5.0);  // case i
                   for (int64_t k = 0; k < kInputs; ++k) x[i * kInputs + k] *= d;
                 }
               },
               true, false, true});
  return t;
}

template <class T>
void check_table(uint64_t seed) {
  Rng rng(seed);
  Mat x(kCases * kInputs), w(kInputs * kUnits);
  for (auto& e : x) e = rng.normal();
  for (auto& e : w) e = rng.normal(0, 0.5);
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(kUnits, rng, 1, 0.5);
  const std::vector<T> beta = addnorm::testing::random_vector<T>(kUnits, rng, 0, 0.5);
  const Mat a = matmul(x, w);
  for (const Transform& tr : transforms()) {
    Mat x2 = x, w2 = w;
    tr.apply(x2, w2, rng);
    const Mat a2 = matmul(x2, w2);
    for (Kind k : {Kind::layer, Kind::batch, Kind::rms}) {
      SCOPED_TRACE(describe(kind_name(k), " ", dtype_name<T>(), " under ", tr.name, " (seed ", seed, ")"));
      const std::vector<double> y = normalize<T>(k, a, gamma, beta);
      const std::vector<double> y2 = normalize<T>(k, a2, gamma, beta);
      double change = 0;
      for (size_t i = 0; i < y.size(); ++i) change = std::max(change, std::fabs(y2[i] - y[i]));
      if (tr.invariant(k)) {
        // Both inputs are rounded to T: a few roundings of the normalized values.
        const addnorm::testing::Tol tol{0, 64, addnorm::testing::eps_of<T>()};
        std::vector<double> scale(y.size());
        for (size_t i = 0; i < y.size(); ++i) scale[i] = 1 + std::fabs(y[i]);
        EXPECT_TRUE(addnorm::testing::all_close("y after the transformation", y2, y, tol, kUnits, scale))
            << "expected invariant";
      } else {
        EXPECT_GT(change, 0.05) << "expected the output to change, largest change " << change;
      }
    }
  }
}

TEST(Invariance, BaKirosHintonTable1) {
  for (uint64_t seed : {1, 2, 3}) {
    check_table<float>(seed);
    check_table<double>(seed);
  }
}

// RMSNorm re-centering, directly: adding the same constant to every element of a row changes
// RMSNorm's output (and leaves LayerNorm's unchanged), while scaling the row does not change it.
template <class T>
void rms_recentering() {
  SCOPED_TRACE(dtype_name<T>());
  Rng rng(17);
  const int64_t d = 64;
  std::vector<T> x(d), shifted(d), scaled(d), y(d), y_shift(d), y_scale(d), l(d), l_shift(d);
  for (int64_t c = 0; c < d; ++c) {
    x[c] = static_cast<T>(rng.normal());
    shifted[c] = static_cast<T>(static_cast<double>(x[c]) + 1.5);
    scaled[c] = static_cast<T>(static_cast<double>(x[c]) * 0.125);  // exact
  }
  auto rms = [&](std::vector<T>& out, const std::vector<T>& in) {
    addnorm::rms_norm_forward<T>(View2D<T>(out.data(), 1, d), {}, View2D<const T>(in.data(), 1, d), {}, kEps);
  };
  auto ln = [&](std::vector<T>& out, const std::vector<T>& in) {
    addnorm::layer_norm_forward<T>(View2D<T>(out.data(), 1, d), {}, {}, View2D<const T>(in.data(), 1, d), {}, {}, kEps);
  };
  rms(y, x);
  rms(y_shift, shifted);
  rms(y_scale, scaled);
  ln(l, x);
  ln(l_shift, shifted);
  double rms_change = 0, ln_change = 0, scale_change = 0;
  for (int64_t c = 0; c < d; ++c) {
    rms_change = std::max(rms_change, std::fabs(static_cast<double>(y_shift[c] - y[c])));
    ln_change = std::max(ln_change, std::fabs(static_cast<double>(l_shift[c] - l[c])));
    scale_change = std::max(scale_change, std::fabs(static_cast<double>(y_scale[c] - y[c])));
  }
  EXPECT_GT(rms_change, 0.1) << "RMSNorm is not invariant to re-centering";
  EXPECT_LT(ln_change, 64 * addnorm::testing::eps_of<T>()) << "LayerNorm is invariant to re-centering";
  EXPECT_LT(scale_change, 8 * addnorm::testing::eps_of<T>()) << "RMSNorm is invariant to re-scaling";
}

TEST(Invariance, RmsNormRecenteringChangesTheOutput) {
  rms_recentering<float>();
  rms_recentering<double>();
}

}  // namespace
