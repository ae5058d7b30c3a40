// libFuzzer target: parse_npy on arbitrary bytes. Any input either parses or throws
// addnorm::Error; a parsed array is consistent, and encoding it and parsing again gives it back.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "addnorm/core/error.hpp"
#include "addnorm/io/npy.hpp"

namespace {
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  addnorm::io::Array a;
  try {
    a = addnorm::io::parse_npy(bytes, "fuzz.npy");
  } catch (const addnorm::Error&) {
    return 0;
  }
  // The element count, as the parser must have computed it: 0 when any dimension is 0 (the others
  // may then be huge), else the product, which must not overflow.
  int64_t count = 1;
  bool has_zero = false;
  for (int64_t d : a.shape) {
    if (d < 0) __builtin_trap();
    has_zero = has_zero || d == 0;
  }
  for (int64_t d : a.shape)
    if (!has_zero && __builtin_mul_overflow(count, d, &count)) __builtin_trap();
  if (has_zero) count = 0;
  if (count != static_cast<int64_t>(a.values.size())) __builtin_trap();
  const addnorm::io::Array b = addnorm::io::parse_npy(addnorm::io::encode_npy(a.values, a.shape, a.dtype), "again.npy");
  if (b.dtype != a.dtype || b.shape != a.shape || b.values.size() != a.values.size()) __builtin_trap();
  for (size_t i = 0; i < a.values.size(); ++i)
    if (!same(a.values[i], b.values[i])) __builtin_trap();
  return 0;
}
