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

}  // namespace addnorm
