// Unicode bars and Python-style number formats for the gradflow tables. See gradflow.hpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "gradflow.hpp"

namespace addnorm::cli::gradflow {

std::string bar(double fraction, int width) {
  // U+2588 FULL BLOCK, then U+2589 .. U+258F: seven eighths down to one eighth.
  static constexpr std::array<const char*, 8> kPart = {"", "\u258F", "\u258E", "\u258D",
                                                       "\u258C", "\u258B", "\u258A", "\u2589"};
  if (width <= 0) return {};
  const double f = std::isnan(fraction) ? 0.0 : std::clamp(fraction, 0.0, 1.0);
  const auto eighths = static_cast<int>(std::lround(f * width * 8));
  const int full = eighths / 8, part = eighths % 8;
  std::string s;
  for (int i = 0; i < full; ++i) s += "\u2588";
  s += kPart[static_cast<size_t>(part)];
  const int used = full + (part > 0 ? 1 : 0);
  s.append(static_cast<size_t>(std::max(0, width - used)), ' ');
  return s;
}

double log_fraction(double v, double lo, double hi) {
  if (!(v > 0) || !(lo > 0) || !(hi > 0)) return 0.0;
  if (hi <= lo) return 1.0;
  return std::clamp((std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)), 0.0, 1.0);
}

std::string fmt_e(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*e", decimals, v);
  return buf;
}

std::string fmt_f(double v, int decimals) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

}  // namespace addnorm::cli::gradflow
