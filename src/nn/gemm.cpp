// GEMM: float through oneDNN's dnnl_sgemm, double through a plain deterministic loop (oneDNN 2.6
// has no dgemm). See include/addnorm/nn/gemm.hpp.
#include "addnorm/nn/gemm.hpp"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>

#include "addnorm/core/error.hpp"
#include "addnorm/core/parallel.hpp"

namespace addnorm::nn {
namespace {

constexpr const char* kFn = "gemm";

void check_args(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                const void* b, int64_t ldb, const void* c, int64_t ldc) {
  require(m >= 0 && n >= 0 && k >= 0, kFn, "negative size m = ", m, ", n = ", n, ", k = ", k);
  // Stored shapes: A is (m, k) or (k, m) when transposed; B is (k, n) or (n, k).
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  require(lda >= std::max<int64_t>(a_cols, 1), kFn, "lda ", lda, " is smaller than A's ", a_cols, " columns");
  require(ldb >= std::max<int64_t>(b_cols, 1), kFn, "ldb ", ldb, " is smaller than B's ", b_cols, " columns");
  require(ldc >= std::max<int64_t>(n, 1), kFn, "ldc ", ldc, " is smaller than C's ", n, " columns");
  require(m * n == 0 || c != nullptr, kFn, "C is null");
  require(m * n * k == 0 || (a != nullptr && b != nullptr), kFn, "A or B is null");
}

template <class T>
void scale_c(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    T* ci = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) ci[j] = beta == T(0) ? T(0) : beta * ci[j];
  }
}

// One row i of C for double: c_i = alpha * sum_p op(A)_ip op(B)_p + beta * c_i, p ascending.
void dgemm_row(bool ta, bool tb, int64_t i, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
               const double* b, int64_t ldb, double beta, double* ci) {
  if (!tb) {
    // c_i = sum_p A_ip * B_p.  (axpy over rows of B, contiguous)
    for (int64_t j = 0; j < n; ++j) ci[j] = beta == 0.0 ? 0.0 : beta * ci[j];
    for (int64_t p = 0; p < k; ++p) {
      const double aip = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);
      const double* bp = b + p * ldb;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) ci[j] += aip * bp[j];
    }
  } else {
    // c_ij = dot(A_i, B_j): B stored (n, k), rows contiguous.
    for (int64_t j = 0; j < n; ++j) {
      const double* bj = b + j * ldb;
      double s = 0;
      if (!ta) {
        const double* ai = a + i * lda;
#pragma omp simd reduction(+ : s)
        for (int64_t p = 0; p < k; ++p) s += ai[p] * bj[p];
      } else {
        for (int64_t p = 0; p < k; ++p) s += a[p * lda + i] * bj[p];
      }
      ci[j] = alpha * s + (beta == 0.0 ? 0.0 : beta * ci[j]);
    }
  }
}

}  // namespace

template <>
void gemm<float>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  check_args(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  // oneDNN's GEMM runs on omp_get_max_threads() threads; make that addnorm::num_threads() for the
  // call (set_num_threads governs every kernel), and restore the caller's setting after it.
  const int want = num_threads(), had = omp_get_max_threads();
  const bool set = !omp_in_parallel() && want != had;  // inside a parallel region oneDNN runs on one thread
  if (set) omp_set_num_threads(want);
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                      beta, c, ldc);
  if (set) omp_set_num_threads(had);
  require(st == dnnl_success, kFn, "dnnl_sgemm failed with status ", static_cast<int>(st), " (m = ", m,
          ", n = ", n, ", k = ", k, ")");
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                  int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  check_args(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  const int nt = omp_in_parallel() ? 1 : threads_for(m * n * k, int64_t{1} << 18);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < m; ++i) dgemm_row(trans_a, trans_b, i, n, k, alpha, a, lda, b, ldb, beta, c + i * ldc);
}

}  // namespace addnorm::nn
