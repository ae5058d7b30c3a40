// Scratch memory for kernels: one grow-only buffer per calling thread, so that repeated calls of
// the same shape allocate nothing.
#pragma once

#include <cstddef>
#include <vector>

namespace addnorm::detail {

// Slot tells apart buffers that one kernel needs at the same time.
template <class T, int Slot = 0>
T* scratch(size_t n) {
  static thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace addnorm::detail
