// Row-major matrix multiply, the one GEMM every nn module goes through:
//
//   C = alpha * op(A) * op(B) + beta * C        op(X) = X or X^T
//
// op(A) is (m, k), op(B) is (k, n), C is (m, n); lda, ldb, ldc are row strides in elements.
// float runs oneDNN's dnnl_sgemm on addnorm::num_threads() threads (set_num_threads governs it as
// it does every kernel; one thread when called inside a parallel region). oneDNN 2.6 has no double
// GEMM, so double (the precision of gradient checks and PyTorch parity, not of training) runs a
// plain cache-friendly loop, parallel over rows of C with OpenMP, each element summed in a fixed
// order (deterministic).
// beta = 0 never reads C (NaN in C does not propagate). k = 0 gives C = beta * C.
// Errors throw addnorm::Error("[gemm] ...").
#pragma once

#include <cstdint>

namespace addnorm::nn {

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace addnorm::nn
