// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter-based generator. The output is a pure function of (key, counter), so a dropout mask is
// regenerated in backward from (seed, element index) instead of being stored.
#pragma once

#include <array>
#include <cstdint>

namespace addnorm {

// Ten rounds of Philox4x32 on `counter` with `key`. Matches the Random123 reference (and the
// known-answer vectors tested in tests/core).
constexpr std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// 32 random bits for element `index` of the stream `seed`. The key is the seed (64 bits); the
// elements are taken in groups of 64: group q uses the 16 blocks with counters 16q .. 16q + 15,
// and element 64q + 16k + j is lane k of block 16q + j. (So 16 blocks computed side by side in
// vector lanes give 64 consecutive elements with no shuffling.)
constexpr uint32_t philox_bits(uint64_t seed, uint64_t index) {
  const uint64_t block = ((index >> 6) << 4) | (index & 15);
  const auto out = philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u},
                                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return out[(index >> 4) & 3];
}

}  // namespace addnorm
