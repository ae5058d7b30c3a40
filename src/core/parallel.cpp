#include "addnorm/core/parallel.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>

#include "addnorm/core/error.hpp"

namespace addnorm {
namespace {
std::atomic<int> g_threads{0};  // 0: not set, use OpenMP's default
}  // namespace

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

void set_num_threads(int n) {
  require(n >= 1, "set_num_threads", "thread count must be >= 1, got ", n);
  g_threads.store(n, std::memory_order_relaxed);
}

int threads_for(int64_t work, int64_t min_work) {
  if (work < min_work || min_work <= 0) return 1;
  const int64_t by_work = work / min_work;
  return static_cast<int>(std::min<int64_t>(num_threads(), std::max<int64_t>(by_work, 1)));
}

}  // namespace addnorm
