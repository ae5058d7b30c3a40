// Dropout with a counter-based mask: element i of a stream is kept when
// philox_bits(seed, offset + i) >= threshold, threshold = round(p * 2^32); kept values are scaled
// by 1 / (1 - p). Nothing is stored: backward regenerates the same mask from (seed, offset).
// p = 0 is the exact identity; p = 1 drops everything (output 0).
#pragma once

#include <cmath>
#include <cstdint>

#include "addnorm/core/error.hpp"
#include "addnorm/core/philox.hpp"

namespace addnorm {

struct DropoutSpec {
  double p = 0.0;       // drop probability in [0, 1]
  uint64_t seed = 0;    // the stream; use a new seed (or offset) for every call in training
  uint64_t offset = 0;  // index of the first element of this call within the stream

  // Throws Error("[fn] ...") unless p is in [0, 1].
  void check(const char* fn) const {
    require(std::isfinite(p) && p >= 0 && p <= 1, fn, "dropout p must be in [0, 1], got ", p);
  }
  [[nodiscard]] bool active() const { return p > 0; }
  // Elements whose 32 bits are below this are dropped.
  [[nodiscard]] uint64_t threshold() const { return static_cast<uint64_t>(std::llround(p * 4294967296.0)); }
  [[nodiscard]] double scale() const { return p >= 1 ? 0.0 : 1.0 / (1.0 - p); }
  // Whether element i (of this call) is kept.
  [[nodiscard]] bool keep(uint64_t i) const { return philox_bits(seed, offset + i) >= threshold(); }
};

}  // namespace addnorm
