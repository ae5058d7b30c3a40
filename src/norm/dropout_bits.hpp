// Philox bits for a run of consecutive elements, each Philox block computed once.
#pragma once

#include <algorithm>
#include <cstdint>

#include "addnorm/core/philox.hpp"

namespace addnorm::detail {

// bits[i] = philox_bits(seed, start + i) for 0 <= i < n.   bits: (n) =
inline void philox_fill(uint32_t* bits, uint64_t seed, uint64_t start, int64_t n) {
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const uint64_t end = start + static_cast<uint64_t>(n);
  for (uint64_t block = start >> 2; (block << 2) < end; ++block) {
    const auto out = philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}, key);
    const uint64_t first = std::max(block << 2, start), last = std::min((block << 2) + 4, end);
    for (uint64_t i = first; i < last; ++i) bits[i - start] = out[i & 3];
  }
}

}  // namespace addnorm::detail
