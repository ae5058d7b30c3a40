// LayerNorm kernels (f32, f64) against the f64 reference over the shape sweep and every layout
// (row stride > d, misaligned base pointers), with and without gamma/beta, in-place (y == x,
// dx == dy); the overwrite (=) and accumulate (+=) conventions; the dx-only backward; and the
// reference backward against central finite differences.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
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

struct LnCase {
  int64_t rows, d;
  Layout layout;
  bool gamma, beta, in_place;
  double eps;
  uint64_t seed;
};

std::vector<double> plus(const std::vector<double>& v, double a) {
  std::vector<double> out(v);
  for (auto& e : out) e += a;
  return out;
}

// One case: forward and backward of the kernel against the reference, every output checked, the
// storage around every buffer checked untouched.
template <class T>
void run_case(const LnCase& k) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(describe("layer_norm ", dtype_name<T>(), " rows=", k.rows, " d=", k.d, " layout=", k.layout.name,
                        " gamma=", k.gamma, " beta=", k.beta, " in_place=", k.in_place, " eps=", k.eps,
                        " seed=", k.seed));
  const T nan = std::numeric_limits<T>::quiet_NaN();
  Rng rng(k.seed);
  Matrix<T> x(k.rows, k.d, k.layout);
  x.fill_normal(rng, 0.5, 2.0);
  Matrix<T> gamma = make_vector<T>(k.d, k.layout), beta = make_vector<T>(k.d, k.layout);
  gamma.fill_normal(rng, 1.0, 0.5);
  beta.fill_normal(rng, 0.0, 0.5);
  const std::span<const T> g = k.gamma ? gamma.cspan() : std::span<const T>{};
  const std::span<const T> b = k.beta ? beta.cspan() : std::span<const T>{};
  Matrix<T> dy(k.rows, k.d, k.layout);
  dy.fill_normal(rng);

  const std::vector<double> xd = x.packed(), dyd = dy.packed();
  const std::vector<double> gd = k.gamma ? gamma.packed() : std::vector<double>{};
  const std::vector<double> bd = k.beta ? beta.packed() : std::vector<double>{};
  const addnorm::ref::Forward rf = addnorm::ref::layer_norm_forward<T>(x.cview(), g, b, k.eps);
  const addnorm::ref::Backward rb = addnorm::ref::layer_norm_backward<T>(dy.cview(), x.cview(), g, k.eps);
  const Scales sc = row_norm_scales<T>(rf, xd, gd, bd, dyd, false);

  // Forward: y (NaN-poisoned, or x itself), mean and rstd (NaN-poisoned) are overwritten.
  Matrix<T> x_work = x;
  Matrix<T> y_sep(k.rows, k.d, k.layout);
  y_sep.fill(nan);
  Matrix<T>& y = k.in_place ? x_work : y_sep;
  Matrix<S> mean = make_vector<S>(k.rows, k.layout), rstd = make_vector<S>(k.rows, k.layout);
  mean.fill(static_cast<S>(nan));
  rstd.fill(static_cast<S>(nan));
  addnorm::layer_norm_forward<T>(y.view(), mean.span(), rstd.span(), x_work.cview(), g, b, k.eps);

  EXPECT_TRUE(all_close("y", y.packed(), rf.y, forward_tol<T>(), k.d, sc.y));
  EXPECT_TRUE(all_close("mean", mean.packed(), rf.mean, forward_tol<T>(), k.rows, sc.mean));
  EXPECT_TRUE(all_close("rstd", rstd.packed(), rf.rstd, forward_tol<T>(), k.rows, sc.rstd));
  EXPECT_TRUE(y.gaps_intact("y"));
  EXPECT_TRUE(mean.gaps_intact("mean"));
  EXPECT_TRUE(rstd.gaps_intact("rstd"));
  if (!k.in_place) {
    EXPECT_TRUE(bitwise_equal<double>("x unchanged", x_work.packed(), xd));
  }

  // Backward: dx (NaN-poisoned, or dy itself) is overwritten; dgamma, dbeta accumulate onto
  // 0.25 and -0.5.
  Matrix<T> dy_work = dy;
  Matrix<T> dx_sep(k.rows, k.d, k.layout);
  dx_sep.fill(nan);
  Matrix<T>& dx = k.in_place ? dy_work : dx_sep;
  Matrix<T> dgamma = make_vector<T>(k.d, k.layout), dbeta = make_vector<T>(k.d, k.layout);
  dgamma.fill(T(0.25));
  dbeta.fill(T(-0.5));
  const std::span<T> dg = k.gamma ? dgamma.span() : std::span<T>{};
  addnorm::layer_norm_backward<T>(dx.view(), dg, dbeta.span(), dy_work.cview(), x.cview(), mean.cspan(), rstd.cspan(),
                                  g);

  EXPECT_TRUE(all_close("dx", dx.packed(), rb.dx, backward_tol<T>(), k.d, sc.dx));
  if (k.gamma) {
    EXPECT_TRUE(
        all_close("dgamma", dgamma.packed(), plus(rb.dgamma, 0.25), backward_tol<T>(), k.d, plus(sc.dgamma, 0.25)));
  }
  EXPECT_TRUE(all_close("dbeta", dbeta.packed(), plus(rb.dbeta, -0.5), backward_tol<T>(), k.d, plus(sc.dbeta, 0.5)));
  EXPECT_TRUE(dx.gaps_intact("dx"));
  EXPECT_TRUE(dgamma.gaps_intact("dgamma"));
  EXPECT_TRUE(dbeta.gaps_intact("dbeta"));
}

// ---------------------------------------------------------------------------------------------
// The shape sweep: every (rows, d) of the issue, every layout, with and without parameters,
// out-of-place and in-place.

struct Shape {
  int64_t rows, d;
};

std::vector<Shape> sweep_shapes() {
  std::vector<Shape> out;
  for (int64_t rows : {0, 1, 5, 257})
    for (int64_t d : {1, 2, 3, 7, 8, 15, 16, 17, 64, 128, 768, 4099}) out.push_back({rows, d});
  return out;
}

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  return describe("rows", info.param.rows, "_d", info.param.d);
}

class LayerNormSweep : public ::testing::TestWithParam<Shape> {};

// Small shapes: every layout x {gamma and beta, none} x {out-of-place, in-place}. Large shapes
// (rows * d > 50000): every layout with parameters out-of-place, plus all variants on the last
// layout (strided and misaligned); huge ones (> 500000): two cases, packed with parameters and
// strided, misaligned, in-place without parameters.
template <class T>
void sweep(Shape s) {
  uint64_t seed = 1000 + static_cast<uint64_t>(s.rows * 7919 + s.d);
  const bool big = s.rows * s.d > 50000, huge = s.rows * s.d > 500000;
  int i = 0;
  for (const Layout& lay : addnorm::testing::all_layouts()) {
    for (bool params : {true, false})
      for (bool in_place : {false, true})
        if (!big || (params && !in_place && (!huge || i == 0)) || (i == 3 && (!huge || (!params && in_place))))
          run_case<T>({s.rows, s.d, lay, params, params, in_place, 1e-5, seed++});
    ++i;
  }
}

template <class T>
void sweep_targets(Shape s) {
  addnorm::testing::for_each_simd_target_if_small(s.rows * s.d, [&] { sweep<T>(s); });
}

TEST_P(LayerNormSweep, F32) { sweep_targets<float>(GetParam()); }
TEST_P(LayerNormSweep, F64) { sweep_targets<double>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormSweep, ::testing::ValuesIn(sweep_shapes()), shape_name);

// gamma without beta and beta without gamma, on small shapes and two eps values.
TEST(LayerNorm, OneParameterOnly) {
  uint64_t seed = 77;
  for (int64_t d : {1, 3, 17, 64})
    for (double eps : {1e-5, 0.5}) {
      run_case<float>({5, d, {2, 1, "stride+2,offset+1"}, true, false, false, eps, seed++});
      run_case<float>({5, d, {}, false, true, true, eps, seed++});
      run_case<double>({5, d, {2, 1, "stride+2,offset+1"}, true, false, false, eps, seed++});
      run_case<double>({5, d, {}, false, true, true, eps, seed++});
    }
}

// Wide f32 rows in pairs whose outputs start on cache lines add their parameter gradients during a
// joint dx pass of both rows when nothing is prefetched (kJointDxCols in src/simd/row_ops.hpp; here
// in cache): rows on a line with a vector and a scalar tail, an odd last row and chunks of 8 rows,
// with both parameters, gamma alone and in-place, beta alone; and rows off a line (1 or 3 elements
// past, stride+2), which keep the other path.
TEST(LayerNorm, WideRowPairs) {
  addnorm::testing::for_each_simd_target([] {
    uint64_t seed = 4242;
    const std::vector<std::pair<int64_t, Layout>> shapes{{4096, {0, 0, "on a line", true}},
                                                         {4112, {0, 0, "on a line", true}},
                                                         {4117, {11, 0, "stride+11, on a line", true}},
                                                         {4096, {0, 1, "offset+1"}},
                                                         {4117, {2, 0, "stride+2"}},
                                                         {8192, {16, 5, "stride+16,offset+5"}}};
    for (const auto& [d, lay] : shapes)
      for (int64_t rows : {2, 3, 9}) {
        run_case<float>({rows, d, lay, true, true, false, 1e-5, seed++});
        run_case<float>({rows, d, lay, true, false, true, 1e-5, seed++});
        run_case<float>({rows, d, lay, false, true, false, 1e-5, seed++});
      }
  });
}

// Streamed wide f32 rows (outputs over 8 MiB) on cache lines go four at a time (ln_backward_quad),
// then a pair and an odd row as left in each chunk of rows: 603 rows are chunks of 10 (two fours and
// a pair) and a last chunk of 3 (a pair and an odd row). Rows of 4096 and of 4100 in a stride of
// 4112 (a scalar tail); off a line (offset+1) they keep the pairs.
TEST(LayerNorm, StreamedWideRowQuads) {
  addnorm::testing::with_wide_l1_on_and_off([] {
    uint64_t seed = 4343;
    for (const auto& [d, lay] : std::vector<std::pair<int64_t, Layout>>{{4096, {0, 0, "on a line", true}},
                                                                        {4100, {12, 0, "stride+12, on a line", true}},
                                                                        {4096, {0, 1, "offset+1"}}}) {
      run_case<float>({603, d, lay, true, true, false, 1e-5, seed++});
      run_case<float>({603, d, lay, false, true, false, 1e-5, seed++});
    }
  });
}

// ADDNORM_WIDE_L1 takes 0 or 1; anything else is an error naming it, at the first large call that
// prefetches rows (the forward's walk) or may take the fours (the backward's).
TEST(LayerNorm, WideL1SwitchRejectsOtherValues) {
  const int64_t rows = 603, d = 4096;
  const Layout on_line{0, 0, "on a line", true};  // the fours' case: dx on a cache line
  Matrix<float> x(rows, d), y(rows, d), dy(rows, d), dx(rows, d, on_line);
  std::vector<float> mean(rows), rstd(rows), gamma(d, 1.0f), dgamma(d), dbeta(d);
  addnorm::layer_norm_forward<float>(y.view(), mean, rstd, x.cview(), gamma, {}, 1e-5);
  addnorm::testing::ScopedEnv env("ADDNORM_WIDE_L1", "yes");
  EXPECT_TRUE(addnorm::testing::throws_error(
      [&] { addnorm::layer_norm_forward<float>(y.view(), mean, rstd, x.cview(), gamma, {}, 1e-5); },
      {"[ADDNORM_WIDE_L1]", "expected 0 or 1", "'yes'"}));
  EXPECT_TRUE(addnorm::testing::throws_error(
      [&] { addnorm::layer_norm_backward<float>(dx.view(), dgamma, dbeta, dy.cview(), x.cview(), mean, rstd, gamma); },
      {"[ADDNORM_WIDE_L1]", "expected 0 or 1", "'yes'"}));
}

// Absent mean/rstd outputs change nothing else; the dx-only backward equals the full backward's dx.
template <class T>
void absent_outputs() {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(dtype_name<T>());
  Rng rng(5);
  const int64_t rows = 9, d = 33;
  Matrix<T> x(rows, d), dy(rows, d), y1(rows, d), y2(rows, d), dx1(rows, d), dx2(rows, d);
  x.fill_normal(rng, 1, 3);
  dy.fill_normal(rng);
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  const std::vector<T> beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.3);
  std::vector<S> mean(rows), rstd(rows);
  std::vector<T> dgamma(d), dbeta(d);
  addnorm::layer_norm_forward<T>(y1.view(), mean, rstd, x.cview(), gamma, beta, 1e-5);
  addnorm::layer_norm_forward<T>(y2.view(), {}, {}, x.cview(), gamma, beta, 1e-5);
  EXPECT_TRUE(bitwise_equal<double>("y without saved statistics", y2.packed(), y1.packed()));
  addnorm::layer_norm_backward<T>(dx1.view(), dgamma, dbeta, dy.cview(), x.cview(), mean, rstd, gamma);
  addnorm::layer_norm_backward_dx<T>(dx2.view(), dy.cview(), x.cview(), mean, rstd, gamma);
  EXPECT_TRUE(bitwise_equal<double>("dx of layer_norm_backward_dx", dx2.packed(), dx1.packed()));
  // dbeta alone (gamma frozen but present, dgamma absent).
  std::vector<T> dbeta2(d);
  addnorm::layer_norm_backward<T>(dx2.view(), {}, dbeta2, dy.cview(), x.cview(), mean, rstd, gamma);
  EXPECT_TRUE(bitwise_equal<T>("dbeta without dgamma", dbeta2, dbeta));
  EXPECT_TRUE(bitwise_equal<double>("dx without dgamma", dx2.packed(), dx1.packed()));
}

TEST(LayerNorm, AbsentOutputs) {
  absent_outputs<float>();
  absent_outputs<double>();
}

// Accumulation: two backward calls into the same dgamma/dbeta add up (+=), dx does not.
TEST(LayerNorm, ParameterGradientsAccumulateAcrossCalls) {
  Rng rng(11);
  const int64_t rows = 6, d = 10;
  Matrix<double> x(rows, d), dy(rows, d), y(rows, d), dx(rows, d);
  x.fill_normal(rng);
  dy.fill_normal(rng);
  const std::vector<double> gamma = addnorm::testing::random_vector<double>(d, rng, 1, 0.3);
  std::vector<double> mean(rows), rstd(rows), dgamma(d, 0.0), dbeta(d, 0.0);
  addnorm::layer_norm_forward<double>(y.view(), mean, rstd, x.cview(), gamma, {}, 1e-5);
  addnorm::layer_norm_backward<double>(dx.view(), dgamma, dbeta, dy.cview(), x.cview(), mean, rstd, gamma);
  const std::vector<double> dx_once = dx.packed(), dg_once = dgamma, db_once = dbeta;
  addnorm::layer_norm_backward<double>(dx.view(), dgamma, dbeta, dy.cview(), x.cview(), mean, rstd, gamma);
  EXPECT_TRUE(bitwise_equal<double>("dx after the second call", dx.packed(), dx_once));
  for (int64_t c = 0; c < d; ++c) {
    EXPECT_DOUBLE_EQ(dgamma[c], 2 * dg_once[c]) << "column " << c;
    EXPECT_DOUBLE_EQ(dbeta[c], 2 * db_once[c]) << "column " << c;
  }
}

// ---------------------------------------------------------------------------------------------
// The reference backward against central finite differences of the reference forward, in f64:
// L = sum(y * w) as a function of x, gamma and beta.

TEST(LayerNormReference, BackwardMatchesFiniteDifferences) {
  using addnorm::testing::central_differences;
  using addnorm::testing::dot;
  uint64_t seed = 300;
  for (int64_t rows : {1, 3})
    for (int64_t d : {1, 2, 5, 16})
      for (double eps : {1e-5, 0.3}) {
        SCOPED_TRACE(describe("ref::layer_norm_backward rows=", rows, " d=", d, " eps=", eps, " seed=", seed));
        Rng rng(seed++);
        std::vector<double> x(static_cast<size_t>(rows * d)), w(x.size());
        for (auto& v : x) v = rng.normal(0.3, 1.5);
        for (auto& v : w) v = rng.normal();
        std::vector<double> gamma = addnorm::testing::random_vector<double>(d, rng, 1, 0.5);
        std::vector<double> beta = addnorm::testing::random_vector<double>(d, rng, 0, 0.5);
        auto loss = [&] {
          return dot(
              addnorm::ref::layer_norm_forward<double>(View2D<const double>(x.data(), rows, d), gamma, beta, eps).y, w);
        };
        const std::vector<double> fd_x = central_differences(x, loss);
        const std::vector<double> fd_g = central_differences(gamma, loss);
        const std::vector<double> fd_b = central_differences(beta, loss);
        const addnorm::ref::Backward rb = addnorm::ref::layer_norm_backward<double>(
            View2D<const double>(w.data(), rows, d), View2D<const double>(x.data(), rows, d), gamma, eps);
        const addnorm::testing::Tol fd_tol{1e-7, 1, 1e-6};  // h = 1e-6: truncation ~ h^2, roundoff ~ 1e-16 / h
        EXPECT_TRUE(all_close("dx", rb.dx, fd_x, fd_tol, d));
        EXPECT_TRUE(all_close("dgamma", rb.dgamma, fd_g, fd_tol, d));
        EXPECT_TRUE(all_close("dbeta", rb.dbeta, fd_b, fd_tol, d));
      }
}

// The tolerance machinery itself can fail: an error of 2x the allowance on one element is found.
TEST(NormTesting, ComparisonCatchesAnErrorJustOutsideTolerance) {
  const addnorm::testing::Tol tol = forward_tol<float>();
  const std::vector<double> ref = {1.0, -2.0, 3.0};
  std::vector<double> got = ref;
  EXPECT_TRUE(all_close("same", got, ref, tol, 3));
  got[1] += 2 * tol.allowed(ref[1]);
  EXPECT_FALSE(all_close("perturbed", got, ref, tol, 3));
  got[1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(all_close("NaN where a number is expected", got, ref, tol, 3));
  Matrix<float> m(2, 3, {2, 1, "stride+2,offset+1"});
  EXPECT_TRUE(m.gaps_intact("fresh"));
  m.data()[3] = 1.0f;  // inside the row-stride gap
  EXPECT_FALSE(m.gaps_intact("written gap"));
}

}  // namespace
