// libFuzzer target: parse_csv on arbitrary text. Any input either parses or throws
// addnorm::Error; a parsed table is consistent, and formatting it and parsing again gives it back
// (names and values).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "addnorm/core/error.hpp"
#include "addnorm/io/csv.hpp"

namespace {
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  addnorm::io::Table t;
  try {
    t = addnorm::io::parse_csv(text, "fuzz.csv");
  } catch (const addnorm::Error&) {
    return 0;
  }
  if (t.rows < 1 || t.cols < 1 || t.values.size() != static_cast<size_t>(t.rows * t.cols)) __builtin_trap();
  if (!t.header.empty() && t.header.size() != static_cast<size_t>(t.cols)) __builtin_trap();
  const addnorm::io::Table u = addnorm::io::parse_csv(addnorm::io::format_csv(t), "again.csv");
  if (u.rows != t.rows || u.cols != t.cols || u.header != t.header) __builtin_trap();
  for (size_t i = 0; i < t.values.size(); ++i)
    if (!same(t.values[i], u.values[i])) __builtin_trap();
  return 0;
}
