// Where the arrays sit in memory does not change a result. The row kernels give a row of 1 KiB or
// more a scalar head up to its output's first cache line (streamed rows, and f32/f64 rows in cache:
// row_has_head in src/simd/row_ops.hpp), so the split between scalar and vector code moves with the
// arrays' offset, and gamma/beta may be copied to sit like the rows (placed_for in
// src/norm/workspace.hpp). On every SIMD target, LayerNorm and RMSNorm forward and backward and the
// fused Add & Norm forward with dropout give the same bits for arrays 0, 1, 3, 4 and 5 elements past
// a cache line (x, y, dy, dx, h, f together; gamma and beta with them or on a line of their own) as
// for arrays on a line. This fails when a formula's scalar and vector forms round differently.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::bf16;
using addnorm::View2D;
using addnorm::testing::Placed;

template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure()
             << what << ", element " << i << ": " << static_cast<double>(a[i]) << " vs " << static_cast<double>(b[i]);
  return ::testing::AssertionSuccess();
}

// Every output of the kernels for one placement, in a fixed order.
template <class T>
struct Outputs {
  std::vector<std::vector<T>> arrays;
  std::vector<std::vector<addnorm::stat_t<T>>> stats;
};

template <class T>
Outputs<T> run_all(int64_t rows, int64_t d, int64_t shift, bool params_with_rows, uint64_t seed) {
  using S = addnorm::stat_t<T>;
  addnorm::testing::Rng rng(seed);
  const auto n = rows * d;
  const int64_t pshift = params_with_rows ? shift : 0;
  Placed<T> x(addnorm::testing::random_vector<T>(n, rng, 0.5, 2.0), shift);
  Placed<T> f(addnorm::testing::random_vector<T>(n, rng, -0.3, 1.5), shift);
  Placed<T> dy(addnorm::testing::random_vector<T>(n, rng, 0.0, 1.0), shift);
  Placed<T> gamma(addnorm::testing::random_vector<T>(d, rng, 1.0, 0.5), pshift);
  Placed<T> beta(addnorm::testing::random_vector<T>(d, rng, 0.0, 0.5), pshift);
  Placed<T> y(std::vector<T>(static_cast<size_t>(n)), shift), dx(std::vector<T>(static_cast<size_t>(n)), shift),
      s(std::vector<T>(static_cast<size_t>(n)), shift);
  const auto view = [&](Placed<T>& p) { return View2D<T>(p.data(), rows, d); };
  const auto cview = [&](Placed<T>& p) { return View2D<const T>(p.data(), rows, d); };
  std::vector<S> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  std::vector<T> dgamma(static_cast<size_t>(d)), dbeta(static_cast<size_t>(d));
  Outputs<T> out;

  addnorm::layer_norm_forward<T>(view(y), mean, rstd, cview(x), gamma.span(), beta.span(), 1e-5);
  out.arrays.push_back(y.values());
  out.stats.push_back(mean);
  out.stats.push_back(rstd);
  addnorm::layer_norm_backward<T>(view(dx), dgamma, dbeta, cview(dy), cview(x), mean, rstd, gamma.span());
  out.arrays.push_back(dx.values());
  out.arrays.push_back(dgamma);
  out.arrays.push_back(dbeta);

  std::fill(dgamma.begin(), dgamma.end(), T{});
  addnorm::rms_norm_forward<T>(view(y), rstd, cview(x), gamma.span(), 1e-6);
  out.arrays.push_back(y.values());
  out.stats.push_back(rstd);
  addnorm::rms_norm_backward<T>(view(dx), dgamma, cview(dy), cview(x), rstd, gamma.span());
  out.arrays.push_back(dx.values());
  out.arrays.push_back(dgamma);

  addnorm::AddNormOptions opt;
  opt.dropout = {0.1, 42, 7};
  addnorm::add_norm_forward<T>(view(s), view(y), mean, rstd, cview(x), cview(f), gamma.span(), beta.span(), opt);
  out.arrays.push_back(s.values());
  out.arrays.push_back(y.values());
  out.stats.push_back(mean);
  out.stats.push_back(rstd);
  return out;
}

template <class T>
void check_placements(int64_t rows, int64_t d) {
  const auto base = run_all<T>(rows, d, 0, true, 5);
  for (int64_t shift : {1, 3, 4, 5})
    for (bool params_with_rows : {true, false}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " d " + std::to_string(d) + " shift " + std::to_string(shift) +
                   (params_with_rows ? ", gamma/beta shifted too" : ", gamma/beta on a line"));
      const auto got = run_all<T>(rows, d, shift, params_with_rows, 5);
      for (size_t k = 0; k < base.arrays.size(); ++k)
        ASSERT_TRUE(same_bits(base.arrays[k], got.arrays[k], "output array " + std::to_string(k)));
      for (size_t k = 0; k < base.stats.size(); ++k)
        ASSERT_TRUE(same_bits(base.stats[k], got.stats[k], "statistics " + std::to_string(k)));
    }
}

TEST(Alignment, ResultsDoNotDependOnWhereTheArraysSit) {
  addnorm::testing::for_each_simd_target([] {
    // Rows in cache (f32: a head for rows of 1 KiB or more), short rows (none), and outputs over
    // 8 MiB (streamed: a head for every type).
    check_placements<float>(9, 300);
    check_placements<float>(5, 1030);
    check_placements<float>(17, 100);
    check_placements<double>(5, 700);
    check_placements<bf16>(9, 600);
    check_placements<float>(2200, 1024);
    check_placements<bf16>(4400, 1000);
  });
}

}  // namespace
