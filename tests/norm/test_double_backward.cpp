// The double backward of LayerNorm and RMSNorm (double_backward.hpp): the f64 reference against
// central finite differences of the reference backward; the kernels (f32, f64, bf16, f16) against
// the reference over a shape sweep, strided and misaligned layouts, and every absent argument, on
// every SIMD target;
// ggamma's accumulation (+=) and its bits for any thread count; the argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "addnorm/norm/double_backward.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::View2D;
using addnorm::testing::all_close;
using addnorm::testing::bitwise_equal;
using addnorm::testing::describe;
using addnorm::testing::dtype_name;
using addnorm::testing::eps_of;
using addnorm::testing::Layout;
using addnorm::testing::make_vector;
using addnorm::testing::Matrix;
using addnorm::testing::Rng;
using addnorm::testing::Tol;

// The loss whose gradients the double backward computes, from the reference backward in f64.
double second_order_loss(const std::vector<double>& x, const std::vector<double>& dy, const std::vector<double>& gamma,
                         const std::vector<double>& ddx, const std::vector<double>& ddgamma,
                         const std::vector<double>& ddbeta, int64_t rows, int64_t d, double eps, bool layer) {
  const View2D<const double> xv(x.data(), rows, d), dyv(dy.data(), rows, d);
  const addnorm::ref::Backward b = layer ? addnorm::ref::layer_norm_backward<double>(dyv, xv, gamma, eps)
                                         : addnorm::ref::rms_norm_backward<double>(dyv, xv, gamma, eps);
  double l = addnorm::testing::dot(b.dx, ddx) + addnorm::testing::dot(b.dgamma, ddgamma);
  if (layer) l += addnorm::testing::dot(b.dbeta, ddbeta);
  return l;
}

TEST(NormDoubleBackwardReference, MatchesFiniteDifferencesOfTheBackward) {
  using addnorm::testing::central_differences;
  uint64_t seed = 900;
  for (bool layer : {true, false})
    for (int64_t rows : {1, 3})
      for (int64_t d : {1, 2, 5, 16})
        for (double eps : {1e-5, 0.3}) {
          SCOPED_TRACE(describe("ref::norm_double_backward layer=", layer, " rows=", rows, " d=", d, " eps=", eps,
                                " seed=", seed));
          Rng rng(seed++);
          const auto n = static_cast<size_t>(rows * d);
          std::vector<double> x(n), dy(n), ddx(n);
          for (auto& v : x) v = rng.normal(0.3, 1.5);
          for (auto& v : dy) v = rng.normal();
          for (auto& v : ddx) v = rng.normal();
          std::vector<double> gamma = addnorm::testing::random_vector<double>(d, rng, 1, 0.5);
          const std::vector<double> ddgamma = addnorm::testing::random_vector<double>(d, rng);
          const std::vector<double> ddbeta = addnorm::testing::random_vector<double>(d, rng);
          auto loss = [&] { return second_order_loss(x, dy, gamma, ddx, ddgamma, ddbeta, rows, d, eps, layer); };
          const std::vector<double> fd_x = central_differences(x, loss);
          const std::vector<double> fd_dy = central_differences(dy, loss);
          const std::vector<double> fd_g = central_differences(gamma, loss);
          const addnorm::ref::DoubleBackward r = addnorm::ref::norm_double_backward<double>(
              View2D<const double>(ddx.data(), rows, d), ddgamma, ddbeta, View2D<const double>(dy.data(), rows, d),
              View2D<const double>(x.data(), rows, d), gamma, eps, layer);
          const Tol fd_tol{1e-6, 1, 1e-5};
          EXPECT_TRUE(all_close("gx", r.gx, fd_x, fd_tol, d));
          EXPECT_TRUE(all_close("gdy", r.gdy, fd_dy, fd_tol, d));
          EXPECT_TRUE(all_close("ggamma", r.ggamma, fd_g, fd_tol, d));
        }
}

// Which arguments a case gives.
struct Given {
  bool ddx = true, ddgamma = true, ddbeta = true, gamma = true;
  bool gx = true, gdy = true, ggamma = true;
  const char* name = "all";
};

std::vector<Given> variants() {
  std::vector<Given> v(7);
  v[1].ddx = false, v[1].name = "no ddx";
  v[2].ddgamma = v[2].ddbeta = false, v[2].name = "no ddgamma, ddbeta";
  v[3].gamma = v[3].ggamma = false, v[3].name = "no gamma";
  v[4].gdy = v[4].ggamma = false, v[4].name = "gx only";
  v[5].gx = false, v[5].name = "gdy and ggamma only";
  v[6].ddx = v[6].ddgamma = false, v[6].name = "ddbeta only";
  return v;
}

// Per row, a bound on the terms behind gx and gdy (the derivative in double_backward.hpp), for
// Tol::allowed: the outputs come from cancellation (P(v), S - A * B).
struct RowScales {
  std::vector<double> gx, gdy;
};

RowScales row_scales(const addnorm::ref::Forward& f, const std::vector<double>& u, const std::vector<double>& dy,
                     const std::vector<double>& gamma, const std::vector<double>& ddgamma,
                     const std::vector<double>& ddbeta, int64_t rows, int64_t d) {
  RowScales s{std::vector<double>(static_cast<size_t>(rows * d)), std::vector<double>(static_cast<size_t>(rows * d))};
  const auto at = [](const std::vector<double>& p, int64_t i, double absent) {
    return p.empty() ? absent : std::fabs(p[static_cast<size_t>(i)]);
  };
  for (int64_t r = 0; r < rows; ++r) {
    double mx = 0, mu = 0, mg = 0, mh = 0, a = 0, b = 0;
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(r * d + i);
      const double xh = std::fabs(f.x_hat[k]), g = std::fabs(dy[k]) * at(gamma, i, 1.0);
      const double uu = u.empty() ? 0.0 : std::fabs(u[k]);
      mx = std::max(mx, xh);
      mu = std::max(mu, uu);
      mg = std::max(mg, g);
      mh = std::max(mh, at(ddgamma, i, 0.0) * std::fabs(dy[k]));
      a += g * xh / static_cast<double>(d);
      b += uu * xh / static_cast<double>(d);
    }
    const double rs = f.rstd[static_cast<size_t>(r)];
    const double q = rs * (2 * mu + mx * b);
    const double c = mh + rs * (a * mu + b * mg);
    const double gx = 2 * rs * c + mx * (rs * (mh * mx + 2 * rs * a * b) + rs * rs * (2 * mu * mg + a * b));
    // The kernel's x_hat comes from the mean saved in stat_t: off by about eps * |mean| * rstd.
    const double shift = 1 + (f.mean.empty() ? 0.0 : std::fabs(f.mean[static_cast<size_t>(r)]) * rs);
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(r * d + i);
      s.gx[k] = gx * shift;
      s.gdy[k] = (at(gamma, i, 1.0) * q + mx * at(ddgamma, i, 0.0) + at(ddbeta, i, 0.0)) * shift;
    }
  }
  return s;
}

struct Case {
  int64_t rows, d;
  Layout layout;
  Given given;
  bool layer;
  uint64_t seed;
};

template <class T>
void run_case(const Case& k) {
  using S = addnorm::stat_t<T>;
  const Given& gv = k.given;
  SCOPED_TRACE(describe(k.layer ? "layer" : "rms", "_norm_double_backward ", dtype_name<T>(), " rows=", k.rows,
                        " d=", k.d, " layout=", k.layout.name, " given=", gv.name, " seed=", k.seed));
  const double eps = 1e-5;
  Rng rng(k.seed);
  Matrix<T> x(k.rows, k.d, k.layout), dy(k.rows, k.d, k.layout), ddx(k.rows, k.d, k.layout);
  x.fill_normal(rng, 0.5, 2.0);
  dy.fill_normal(rng);
  ddx.fill_normal(rng);
  Matrix<T> gamma = make_vector<T>(k.d, k.layout), ddgamma = make_vector<T>(k.d, k.layout);
  Matrix<T> ddbeta = make_vector<T>(k.d, k.layout);
  gamma.fill_normal(rng, 1.0, 0.5);
  ddgamma.fill_normal(rng);
  ddbeta.fill_normal(rng);
  const std::span<const T> g = gv.gamma ? gamma.cspan() : std::span<const T>{};
  const std::span<const T> vw = gv.ddgamma ? ddgamma.cspan() : std::span<const T>{};
  const std::span<const T> vb = gv.ddbeta && k.layer ? ddbeta.cspan() : std::span<const T>{};
  const View2D<const T> u = gv.ddx ? ddx.cview() : View2D<const T>{};

  // The statistics as the forward kernel saves them.
  Matrix<T> y(k.rows, k.d, k.layout);
  std::vector<S> mean(static_cast<size_t>(k.rows)), rstd(static_cast<size_t>(k.rows));
  if (k.layer) {
    addnorm::layer_norm_forward<T>(y.view(), mean, rstd, x.cview(), g, {}, eps);
  } else {
    addnorm::rms_norm_forward<T>(y.view(), rstd, x.cview(), g, eps);
  }

  const T nan = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
  Matrix<T> gx(k.rows, k.d, k.layout), gdy(k.rows, k.d, k.layout), ggamma = make_vector<T>(k.d, k.layout);
  gx.fill(nan);
  gdy.fill(nan);
  ggamma.fill(static_cast<T>(0.25f));
  const View2D<T> gx_v = gv.gx ? gx.view() : View2D<T>{};
  const View2D<T> gdy_v = gv.gdy ? gdy.view() : View2D<T>{};
  const std::span<T> gg = gv.ggamma ? ggamma.span() : std::span<T>{};
  if (k.layer) {
    addnorm::layer_norm_double_backward<T>(gx_v, gdy_v, gg, u, vw, vb, dy.cview(), x.cview(), mean, rstd, g);
  } else {
    addnorm::rms_norm_double_backward<T>(gx_v, gdy_v, gg, u, vw, dy.cview(), x.cview(), rstd, g);
  }

  const addnorm::ref::DoubleBackward r =
      addnorm::ref::norm_double_backward<T>(u, vw, vb, dy.cview(), x.cview(), g, eps, k.layer);
  const addnorm::ref::Forward f = k.layer ? addnorm::ref::layer_norm_forward<T>(x.cview(), g, {}, eps)
                                          : addnorm::ref::rms_norm_forward<T>(x.cview(), g, eps);
  const auto doubles = [](std::span<const T> p) { return addnorm::testing::to_double(p); };
  const RowScales sc = row_scales(f, gv.ddx ? ddx.packed() : std::vector<double>{}, dy.packed(), doubles(g),
                                  doubles(vw), doubles(vb), k.rows, k.d);
  // Rounding of the output, plus f32 (f64) sums of d terms; the saved mean and rstd are rounded to
  // stat_t<T>, which moves x_hat by about eps(S) * (1 + |mean| * rstd).
  const Tol tol{1e-300, 16 + 2 * std::sqrt(static_cast<double>(k.d)), std::max(eps_of<T>(), eps_of<S>())};
  // A case whose exact results pass f16's range (65504: RMSNorm of one tiny element) is not compared.
  const auto in_range = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double e) { return !(std::fabs(e) > 6e4); });
  };
  if (std::is_same_v<T, addnorm::f16> && !(in_range(r.gx) && in_range(r.gdy) && in_range(r.ggamma))) {
    std::printf("    skipped: results beyond f16's range\n");
    return;
  }
  if (gv.gx) {
    EXPECT_TRUE(all_close("gx", gx.packed(), r.gx, tol, k.d, sc.gx));
  }
  if (gv.gdy) {
    EXPECT_TRUE(all_close("gdy", gdy.packed(), r.gdy, tol, k.d, sc.gdy));
  }
  if (gv.ggamma) {
    std::vector<double> want = r.ggamma, scale(static_cast<size_t>(k.d));
    for (int64_t i = 0; i < k.d; ++i) {
      double s = 0.25;
      for (int64_t row = 0; row < k.rows; ++row)
        s += std::fabs(static_cast<double>(dy(row, i))) * sc.gdy[static_cast<size_t>(row * k.d + i)];
      want[static_cast<size_t>(i)] += 0.25;
      scale[static_cast<size_t>(i)] = s;
    }
    EXPECT_TRUE(all_close("ggamma (+= onto 0.25)", ggamma.packed(), want, tol, k.d, scale));
  } else {
    EXPECT_TRUE(
        all_close("ggamma untouched", ggamma.packed(), std::vector<double>(static_cast<size_t>(k.d), 0.25), tol, k.d));
  }
  if (!gv.gx && k.rows > 0) {
    EXPECT_TRUE(std::isnan(static_cast<double>(gx(0, 0)))) << "gx written";
  }
  if (!gv.gdy && k.rows > 0) {
    EXPECT_TRUE(std::isnan(static_cast<double>(gdy(0, 0)))) << "gdy written";
  }
  EXPECT_TRUE(gx.gaps_intact("gx"));
  EXPECT_TRUE(gdy.gaps_intact("gdy"));
  EXPECT_TRUE(ggamma.gaps_intact("ggamma"));
}

struct Shape {
  int64_t rows, d;
};

class NormDoubleBackwardSweep : public ::testing::TestWithParam<Shape> {};

template <class T>
void sweep(Shape s) {
  uint64_t seed = 7000 + static_cast<uint64_t>(s.rows * 7919 + s.d);
  const std::vector<Layout> layouts = addnorm::testing::all_layouts();
  const bool big = s.rows * s.d > 50000;
  for (bool layer : {true, false}) {
    int i = 0;
    for (const Given& gv : variants()) {
      // Every variant packed; the first three strided and misaligned too (the first only, when big).
      run_case<T>({s.rows, s.d, layouts[0], gv, layer, seed++});
      if (i == 0 || (i < 3 && !big)) run_case<T>({s.rows, s.d, layouts[3], gv, layer, seed++});
      ++i;
    }
  }
}

template <class T>
void sweep_targets(Shape s) {
  addnorm::testing::for_each_simd_target_if_small(s.rows * s.d, [&] { sweep<T>(s); });
}

TEST_P(NormDoubleBackwardSweep, F32) { sweep_targets<float>(GetParam()); }
TEST_P(NormDoubleBackwardSweep, F64) { sweep_targets<double>(GetParam()); }
TEST_P(NormDoubleBackwardSweep, BF16) { sweep_targets<addnorm::bf16>(GetParam()); }
TEST_P(NormDoubleBackwardSweep, F16) { sweep_targets<addnorm::f16>(GetParam()); }

std::vector<Shape> sweep_shapes() {
  std::vector<Shape> out;
  for (int64_t rows : {0, 1, 5, 70})
    for (int64_t d : {1, 2, 3, 16, 17, 768, 4099}) out.push_back({rows, d});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormDoubleBackwardSweep, ::testing::ValuesIn(sweep_shapes()),
                         [](const ::testing::TestParamInfo<Shape>& p) {
                           return describe("rows", p.param.rows, "_d", p.param.d);
                         });

// gx, gdy and ggamma have the same bits on 1 and 2 threads (ggamma: fixed chunks of rows).
template <class T>
void same_bits_any_threads(bool layer) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(describe(dtype_name<T>(), layer ? " layer" : " rms"));
  const int64_t rows = 300, d = 257;
  Rng rng(11);
  Matrix<T> x(rows, d), dy(rows, d), ddx(rows, d), y(rows, d);
  x.fill_normal(rng, 1, 2);
  dy.fill_normal(rng);
  ddx.fill_normal(rng);
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  const std::vector<T> vw = addnorm::testing::random_vector<T>(d, rng);
  const std::vector<T> vb = addnorm::testing::random_vector<T>(d, rng);
  std::vector<S> mean(rows), rstd(rows);
  addnorm::layer_norm_forward<T>(y.view(), mean, rstd, x.cview(), gamma, {}, 1e-5);
  std::vector<std::vector<double>> got;
  for (int threads : {1, 2}) {
    addnorm::testing::ScopedThreads scoped(threads);
    Matrix<T> gx(rows, d), gdy(rows, d);
    std::vector<T> gg(d, static_cast<T>(0.0f));
    if (layer) {
      addnorm::layer_norm_double_backward<T>(gx.view(), gdy.view(), gg, ddx.cview(), vw, vb, dy.cview(), x.cview(),
                                             mean, rstd, gamma);
    } else {
      addnorm::rms_norm_double_backward<T>(gx.view(), gdy.view(), gg, ddx.cview(), vw, dy.cview(), x.cview(), rstd,
                                           gamma);
    }
    std::vector<double> all = gx.packed(), more = gdy.packed();
    all.insert(all.end(), more.begin(), more.end());
    for (const T& v : gg) all.push_back(static_cast<double>(v));
    got.push_back(all);
  }
  EXPECT_TRUE(bitwise_equal<double>("gx, gdy, ggamma on 1 and 2 threads", got[0], got[1]));
}

TEST(NormDoubleBackward, SameBitsForAnyThreadCount) {
  for (bool layer : {true, false}) {
    same_bits_any_threads<float>(layer);
    same_bits_any_threads<addnorm::bf16>(layer);
  }
}

TEST(NormDoubleBackward, Errors) {
  using addnorm::testing::throws_error;
  const int64_t rows = 4, d = 8;
  Matrix<float> x(rows, d), dy(rows, d), gx(rows, d), gdy(rows, d), x5(rows, d + 1), y(rows, d);
  std::vector<float> mean(rows, 0.f), rstd(rows, 1.f), gamma(d, 1.f), gg(d), p7(d - 1), r3(rows - 1);
  const std::span<const float> none;
  EXPECT_TRUE(throws_error(
      [&] {
        addnorm::layer_norm_double_backward<float>(gx.view(), gdy.view(), gg, {}, {}, {}, x5.cview(), x.cview(), mean,
                                                   rstd, gamma);
      },
      {"[layer_norm_double_backward]", "dy is 4 x 9 but x is 4 x 8"}));
  EXPECT_TRUE(throws_error(
      [&] {
        addnorm::layer_norm_double_backward<float>(x5.view(), gdy.view(), gg, {}, {}, {}, dy.cview(), x.cview(), mean,
                                                   rstd, gamma);
      },
      {"[layer_norm_double_backward]", "gx is 4 x 9"}));
  EXPECT_TRUE(throws_error(
      [&] {
        addnorm::layer_norm_double_backward<float>(gx.view(), gdy.view(), {}, x5.cview(), {}, {}, dy.cview(), x.cview(),
                                                   mean, rstd, gamma);
      },
      {"[layer_norm_double_backward]", "ddx is 4 x 9"}));
  EXPECT_TRUE(throws_error(
      [&] {
        addnorm::layer_norm_double_backward<float>(gx.view(), gdy.view(), gg, {}, {}, {}, dy.cview(), x.cview(), mean,
                                                   rstd, none);
      },
      {"[layer_norm_double_backward]", "ggamma requested but gamma is absent"}));
  EXPECT_TRUE(throws_error(
      [&] {
        addnorm::layer_norm_double_backward<float>(gx.view(), gdy.view(), {}, {}, p7, {}, dy.cview(), x.cview(), mean,
                                                   rstd, gamma);
      },
      {"[layer_norm_double_backward]", "ddgamma has 7 elements, expected 8"}));
  EXPECT_TRUE(throws_error(
      [&] {
        addnorm::layer_norm_double_backward<float>(gx.view(), gdy.view(), {}, {}, {}, {}, dy.cview(), x.cview(), r3,
                                                   rstd, gamma);
      },
      {"[layer_norm_double_backward]", "mean has 3 elements, expected 4"}));
  EXPECT_TRUE(throws_error(
      [&] {
        addnorm::rms_norm_double_backward<float>(gx.view(), gdy.view(), {}, {}, {}, dy.cview(), x.cview(), r3, gamma);
      },
      {"[rms_norm_double_backward]", "rstd has 3 elements, expected 4"}));
  EXPECT_TRUE(throws_error(
      [&] {
        addnorm::rms_norm_double_backward<float>(gx.view(), gdy.view(), {}, {}, {}, dy.cview(),
                                                 Matrix<float>(4, 0).cview(), rstd, gamma);
      },
      {"[rms_norm_double_backward]", "d = 0"}));
}

}  // namespace
