#include "format.hpp"

#include <cmath>
#include <cstdio>
#include <string_view>

#include "addnorm/io/csv.hpp"

namespace addnorm::cli {

std::string fmt_num(double v, int decimals) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (std::fabs(v) >= 1e16) return io::shortest_number(v);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  // Drop trailing zeros and a trailing point, then a negative zero's sign (trimming the view, not
  // the string, also keeps GCC 12's -Wrestrict false positive on std::string away).
  std::string_view s(buf);
  if (s.find('.') != std::string_view::npos) {
    while (s.back() == '0') s.remove_suffix(1);
    if (s.back() == '.') s.remove_suffix(1);
  }
  if (s == "-0") s.remove_prefix(1);
  return std::string(s);
}

std::string fmt_vec(std::span<const double> v, int decimals) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ", ";
    s += fmt_num(v[i], decimals);
  }
  return s + "]";
}

std::string fmt_matrix(std::span<const double> v, int64_t rows, int64_t cols, int decimals) {
  const auto row = [&](int64_t r) { return v.subspan(static_cast<size_t>(r * cols), static_cast<size_t>(cols)); };
  std::string s = "[";
  for (int64_t r = 0; r < rows; ++r) {
    if (r > 0) s += ",\n ";
    s += fmt_vec(row(r), decimals);
  }
  return s + "]";
}

}  // namespace addnorm::cli
