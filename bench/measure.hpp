// Shared by addnorm_compare and addnorm_anatomy: the timing method (a calibrated batch of calls,
// timed `reps` times) and the STREAM triad with streaming stores.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace addnorm::bench {

struct Timing {
  double best = 0, median = 0;  // seconds per call
  int64_t calls = 0;            // calls per batch
  int batches = 0;
};

using Clock = std::chrono::steady_clock;

inline double seconds_of(const std::function<void()>& fn, int64_t k) {
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < k; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One warm call, then a batch size k such that k calls take >= min_time, then `reps` batches timed:
// the best and the median time per call.
inline Timing measure(const std::function<void()>& fn, double min_time, int reps) {
  fn();  // warm: caches, thread pool, lazily initialized state
  int64_t k = 1;
  for (;;) {  // calibrate the batch size
    const double t = seconds_of(fn, k);
    if (t >= min_time / 4 || k >= (int64_t{1} << 30)) {
      k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(k) * min_time / std::max(t, 1e-9))));
      break;
    }
    k *= t > 0 ? std::clamp<int64_t>(static_cast<int64_t>(min_time / 4 / t) + 1, 2, 1000) : 1000;
  }
  std::vector<double> per_call;
  for (int r = 0; r < reps; ++r) per_call.push_back(seconds_of(fn, k) / static_cast<double>(k));
  std::sort(per_call.begin(), per_call.end());
  return {per_call.front(), per_call[per_call.size() / 2], k, reps};
}

// a[i] = b[i] + s * c[i] over [0, n), n a multiple of 8, a 64-byte aligned: with streaming
// (non-temporal) stores where the compiler targets SSE2/AVX/AVX-512, which skip the read-for-
// ownership of a's cache lines. Returns false when no streaming store is available.
inline bool triad_streaming(double* a, const double* b, const double* c, double s, int64_t n, int t) {
#if defined(__AVX512F__)
  constexpr int64_t w = 8;
#elif defined(__AVX__)
  constexpr int64_t w = 4;
#elif defined(__SSE2__)
  constexpr int64_t w = 2;
#else
  (void)a, (void)b, (void)c, (void)s, (void)n, (void)t;
  return false;
#endif
#if defined(__SSE2__)
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t i = 0; i < n; i += w) {
#if defined(__AVX512F__)
    _mm512_stream_pd(a + i,
                     _mm512_add_pd(_mm512_load_pd(b + i), _mm512_mul_pd(_mm512_set1_pd(s), _mm512_load_pd(c + i))));
#elif defined(__AVX__)
    _mm256_stream_pd(a + i,
                     _mm256_add_pd(_mm256_load_pd(b + i), _mm256_mul_pd(_mm256_set1_pd(s), _mm256_load_pd(c + i))));
#else
    _mm_stream_pd(a + i, _mm_add_pd(_mm_load_pd(b + i), _mm_mul_pd(_mm_set1_pd(s), _mm_load_pd(c + i))));
#endif
  }
  _mm_sfence();
  return true;
#endif
}

}  // namespace addnorm::bench
