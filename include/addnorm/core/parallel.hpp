// Threads: addnorm runs its kernels on OpenMP threads with static schedules. Small inputs stay on
// one thread, because starting threads costs more than normalizing a short row.
#pragma once

#include <cstdint>

namespace addnorm {

// The number of threads kernels may use (defaults to OpenMP's omp_get_max_threads()).
int num_threads();

// Sets the number of threads kernels may use; n >= 1, else throws Error.
void set_num_threads(int n);

// The number of threads for a job of `work` elements: 1 when work < min_work, else
// num_threads() capped so that each thread gets at least min_work elements.
int threads_for(int64_t work, int64_t min_work);

// Runs f(i) for 0 <= i < n on `threads` OpenMP threads with a static schedule (each thread takes
// one contiguous block, in order), or inline on the calling thread when threads <= 1: entering
// even a one-thread OpenMP region costs about a microsecond, as much as normalizing a short row.
template <class F>
void parallel_for(int64_t n, int threads, F&& f) {
  if (threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace addnorm
