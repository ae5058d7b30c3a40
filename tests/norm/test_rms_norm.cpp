// RMSNorm kernels (f32, f64) against the f64 reference over the shape sweep and every layout
// (row stride > d, misaligned base pointers), with and without gamma, in-place (y == x,
// dx == dy); the overwrite (=) and accumulate (+=) conventions; the dx-only backward; and the
// reference backward against central finite differences.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::View2D;
using addnorm::testing::all_close;
using addnorm::testing::backward_tol;
using addnorm::testing::bitwise_equal;
using addnorm::testing::describe;
using addnorm::testing::dtype_name;
using addnorm::testing::forward_tol;
using addnorm::testing::Layout;
using addnorm::testing::make_vector;
using addnorm::testing::Matrix;
using addnorm::testing::Rng;
using addnorm::testing::row_norm_scales;
using addnorm::testing::Scales;

struct RmsCase {
  int64_t rows, d;
  Layout layout;
  bool gamma, in_place;
  double eps;
  uint64_t seed;
  double mean;  // of the random x (RMSNorm does not subtract it)
};

std::vector<double> plus(const std::vector<double>& v, double a) {
  std::vector<double> out(v);
  for (auto& e : out) e += a;
  return out;
}

template <class T>
void run_case(const RmsCase& k) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(describe("rms_norm ", dtype_name<T>(), " rows=", k.rows, " d=", k.d, " layout=", k.layout.name,
                        " gamma=", k.gamma, " in_place=", k.in_place, " eps=", k.eps, " x~N(", k.mean,
                        ",2) seed=", k.seed));
  const T nan = std::numeric_limits<T>::quiet_NaN();
  Rng rng(k.seed);
  Matrix<T> x(k.rows, k.d, k.layout);
  x.fill_normal(rng, k.mean, 2.0);
  Matrix<T> gamma = make_vector<T>(k.d, k.layout);
  gamma.fill_normal(rng, 1.0, 0.5);
  const std::span<const T> g = k.gamma ? gamma.cspan() : std::span<const T>{};
  Matrix<T> dy(k.rows, k.d, k.layout);
  dy.fill_normal(rng);

  const std::vector<double> xd = x.packed(), dyd = dy.packed();
  const std::vector<double> gd = k.gamma ? gamma.packed() : std::vector<double>{};
  const addnorm::ref::Forward rf = addnorm::ref::rms_norm_forward<T>(x.cview(), g, k.eps);
  const addnorm::ref::Backward rb = addnorm::ref::rms_norm_backward<T>(dy.cview(), x.cview(), g, k.eps);
  const Scales sc = row_norm_scales<T>(rf, xd, gd, {}, dyd, true);

  Matrix<T> x_work = x;
  Matrix<T> y_sep(k.rows, k.d, k.layout);
  y_sep.fill(nan);
  Matrix<T>& y = k.in_place ? x_work : y_sep;
  Matrix<S> rstd = make_vector<S>(k.rows, k.layout);
  rstd.fill(static_cast<S>(nan));
  addnorm::rms_norm_forward<T>(y.view(), rstd.span(), x_work.cview(), g, k.eps);

  EXPECT_TRUE(all_close("y", y.packed(), rf.y, forward_tol<T>(), k.d, sc.y));
  EXPECT_TRUE(all_close("rstd", rstd.packed(), rf.rstd, forward_tol<T>(), k.rows, sc.rstd));
  EXPECT_TRUE(y.gaps_intact("y"));
  EXPECT_TRUE(rstd.gaps_intact("rstd"));

  Matrix<T> dy_work = dy;
  Matrix<T> dx_sep(k.rows, k.d, k.layout);
  dx_sep.fill(nan);
  Matrix<T>& dx = k.in_place ? dy_work : dx_sep;
  Matrix<T> dgamma = make_vector<T>(k.d, k.layout);
  dgamma.fill(T(0.25));
  const std::span<T> dg = k.gamma ? dgamma.span() : std::span<T>{};
  addnorm::rms_norm_backward<T>(dx.view(), dg, dy_work.cview(), x.cview(), rstd.cspan(), g);

  EXPECT_TRUE(all_close("dx", dx.packed(), rb.dx, backward_tol<T>(), k.d, sc.dx));
  if (k.gamma) {
    EXPECT_TRUE(
        all_close("dgamma", dgamma.packed(), plus(rb.dgamma, 0.25), backward_tol<T>(), k.d, plus(sc.dgamma, 0.25)));
  } else {
    EXPECT_TRUE(all_close("dgamma untouched", dgamma.packed(), plus(std::vector<double>(k.d, 0.0), 0.25),
                          backward_tol<T>(), k.d));
  }
  EXPECT_TRUE(dx.gaps_intact("dx"));
  EXPECT_TRUE(dgamma.gaps_intact("dgamma"));
}

struct Shape {
  int64_t rows, d;
};

std::vector<Shape> sweep_shapes() {
  std::vector<Shape> out;
  for (int64_t rows : {0, 1, 5, 257})
    for (int64_t d : {1, 2, 3, 7, 8, 15, 16, 17, 64, 768, 4099}) out.push_back({rows, d});
  return out;
}

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  return describe("rows", info.param.rows, "_d", info.param.d);
}

class RmsNormSweep : public ::testing::TestWithParam<Shape> {};

// Small shapes: every layout x three variants. Large shapes (rows * d > 50000): the first variant
// on every layout, the other two on the first and last layouts; huge ones (> 500000): the first
// variant packed, the other two strided and misaligned.
template <class T>
void sweep(Shape s) {
  uint64_t seed = 5000 + static_cast<uint64_t>(s.rows * 7919 + s.d);
  const bool big = s.rows * s.d > 50000, huge = s.rows * s.d > 500000;
  int i = 0;
  for (const Layout& lay : addnorm::testing::all_layouts()) {
    if (!huge || i == 0) run_case<T>({s.rows, s.d, lay, true, false, 1e-5, seed++, 0.5});
    if (!big || (i % 3 == 0 && !huge) || i == 3) {
      run_case<T>({s.rows, s.d, lay, false, false, 1e-5, seed++, 3.0});
      run_case<T>({s.rows, s.d, lay, true, true, 1e-6, seed++, -1.0});
    }
    ++i;
  }
}

template <class T>
void sweep_targets(Shape s) {
  addnorm::testing::for_each_simd_target_if_small(s.rows * s.d, [&] { sweep<T>(s); });
}

TEST_P(RmsNormSweep, F32) { sweep_targets<float>(GetParam()); }
TEST_P(RmsNormSweep, F64) { sweep_targets<double>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormSweep, ::testing::ValuesIn(sweep_shapes()), shape_name);

// Streamed wide f32 rows on cache lines go four at a time (rms_backward_quad), as LayerNorm's
// (test_layer_norm.cpp, StreamedWideRowQuads): 603 rows are chunks of 10 (two fours and a pair) and a
// last chunk of 3 (a pair and an odd row); rows of 4096 and of 4100 in a stride of 4112; off a line
// they keep the rows one at a time.
TEST(RmsNorm, StreamedWideRowQuads) {
  addnorm::testing::with_wide_l1_on_and_off([] {
    uint64_t seed = 4444;
    for (const auto& [d, lay] : std::vector<std::pair<int64_t, Layout>>{{4096, {0, 0, "on a line", true}},
                                                                        {4100, {12, 0, "stride+12, on a line", true}},
                                                                        {4096, {0, 1, "offset+1"}}}) {
      run_case<float>({603, d, lay, true, false, 1e-5, seed++, 0.5});
      run_case<float>({603, d, lay, false, false, 1e-5, seed++, 0.5});
    }
  });
}

template <class T>
void dx_only() {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(dtype_name<T>());
  Rng rng(6);
  const int64_t rows = 9, d = 33;
  Matrix<T> x(rows, d), dy(rows, d), y1(rows, d), y2(rows, d), dx1(rows, d), dx2(rows, d);
  x.fill_normal(rng, 1, 3);
  dy.fill_normal(rng);
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  std::vector<S> rstd(rows);
  std::vector<T> dgamma(d);
  addnorm::rms_norm_forward<T>(y1.view(), rstd, x.cview(), gamma, 1e-5);
  addnorm::rms_norm_forward<T>(y2.view(), {}, x.cview(), gamma, 1e-5);
  EXPECT_TRUE(bitwise_equal<double>("y without saved rstd", y2.packed(), y1.packed()));
  addnorm::rms_norm_backward<T>(dx1.view(), dgamma, dy.cview(), x.cview(), rstd, gamma);
  addnorm::rms_norm_backward_dx<T>(dx2.view(), dy.cview(), x.cview(), rstd, gamma);
  EXPECT_TRUE(bitwise_equal<double>("dx of rms_norm_backward_dx", dx2.packed(), dx1.packed()));
}

TEST(RmsNorm, AbsentOutputs) {
  dx_only<float>();
  dx_only<double>();
}

TEST(RmsNormReference, BackwardMatchesFiniteDifferences) {
  using addnorm::testing::central_differences;
  using addnorm::testing::dot;
  uint64_t seed = 400;
  for (int64_t rows : {1, 3})
    for (int64_t d : {1, 2, 5, 16})
      for (double eps : {1e-5, 0.3}) {
        SCOPED_TRACE(describe("ref::rms_norm_backward rows=", rows, " d=", d, " eps=", eps, " seed=", seed));
        Rng rng(seed++);
        std::vector<double> x(static_cast<size_t>(rows * d)), w(x.size());
        for (auto& v : x) v = rng.normal(0.3, 1.5);
        for (auto& v : w) v = rng.normal();
        std::vector<double> gamma = addnorm::testing::random_vector<double>(d, rng, 1, 0.5);
        auto loss = [&] {
          return dot(addnorm::ref::rms_norm_forward<double>(View2D<const double>(x.data(), rows, d), gamma, eps).y, w);
        };
        const std::vector<double> fd_x = central_differences(x, loss);
        const std::vector<double> fd_g = central_differences(gamma, loss);
        const addnorm::ref::Backward rb = addnorm::ref::rms_norm_backward<double>(
            View2D<const double>(w.data(), rows, d), View2D<const double>(x.data(), rows, d), gamma, eps);
        const addnorm::testing::Tol fd_tol{1e-7, 1, 1e-6};
        EXPECT_TRUE(all_close("dx", rb.dx, fd_x, fd_tol, d));
        EXPECT_TRUE(all_close("dgamma", rb.dgamma, fd_g, fd_tol, d));
        EXPECT_TRUE(rb.dbeta.empty());
      }
}

}  // namespace
