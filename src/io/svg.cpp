// SVG line charts. See include/addnorm/io/svg.hpp.
#include "addnorm/io/svg.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string_view>
#include <limits>

#include "addnorm/core/error.hpp"
#include "addnorm/io/atomic_file.hpp"

namespace addnorm::io {
namespace {

constexpr const char* kFn = "render_line_chart";

// Okabe-Ito colors (distinguishable with common color-vision deficiencies), then black.
constexpr std::array<const char*, 8> kColors = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                "#E69F00", "#56B4E9", "#000000", "#999999"};
constexpr std::array<const char*, 3> kDashes = {"", "6,3", "2,3"};

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters; drop them.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// A tick label: integers plainly, other values in %g ("0.5", "1e-05").
std::string tick_label(double v) {
  char buf[32];
  if (std::fabs(v) < 1e6 && v == std::round(v))
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  else
    std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Round-number ticks covering [lo, hi]: about `target` of them, steps of 1, 2 or 5 times 10^k.
std::vector<double> nice_ticks(double lo, double hi, int target) {
  const double span = hi - lo;
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}

// Appends the parts to o (one append each: GCC 12 misreports -Wrestrict on chains of
// std::string operator+).
void put(std::string& o, std::initializer_list<std::string_view> parts) {
  for (const std::string_view p : parts) o.append(p);
}

bool drawable(double x, double y, bool log_y) { return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0); }

}  // namespace

std::string render_line_chart(const LineChart& c) {
  require(c.width >= 200 && c.height >= 200, kFn, "the chart must be at least 200 x 200 pixels, got ", c.width, " x ",
          c.height);
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const Series& s : c.series) {
    require(s.x.size() == s.y.size(), kFn, "series '", s.name, "' has ", s.x.size(), " x values and ", s.y.size(),
            " y values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!drawable(s.x[i], s.y[i], c.log_y)) continue;
      const double y = c.log_y ? std::log10(s.y[i]) : s.y[i];
      xlo = std::min(xlo, s.x[i]);
      xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, y);
      yhi = std::max(yhi, y);
    }
  }
  require(xlo <= xhi, kFn, "no series has a point that can be drawn", c.log_y ? " (a log axis needs y > 0)" : "");
  // Pad degenerate ranges; a log axis spans whole decades.
  if (xlo == xhi) xlo -= 1, xhi += 1;
  if (c.log_y) {
    ylo = std::floor(ylo);
    yhi = std::ceil(yhi);
    if (ylo == yhi) ylo -= 1, yhi += 1;
  } else {
    if (ylo == yhi) ylo -= 1, yhi += 1;
    const double pad = (yhi - ylo) * 0.05;
    ylo -= pad;
    yhi += pad;
  }

  const double left = 80, right = 190, top = 50, bottom = 60;
  const double pw = c.width - left - right, ph = c.height - top - bottom;
  const auto px = [&](double x) { return left + (x - xlo) / (xhi - xlo) * pw; };
  const auto py = [&](double y) { return top + ph - ((c.log_y ? std::log10(y) : y) - ylo) / (yhi - ylo) * ph; };
  const auto pyv = [&](double v) { return top + ph - (v - ylo) / (yhi - ylo) * ph; };  // v on the axis scale

  std::string o;
  const std::string w = std::to_string(c.width), h = std::to_string(c.height);
  put(o, {"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"",
          w, "\" height=\"", h, "\" viewBox=\"0 0 ", w, " ", h, "\" font-family=\"sans-serif\" font-size=\"12\">\n"});
  put(o, {"<title>", escape(c.title), "</title>\n"});
  put(o, {"<rect x=\"0\" y=\"0\" width=\"", w, "\" height=\"", h, "\" fill=\"white\"/>\n"});
  put(o, {"<text x=\"", num(left + pw / 2), "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">", escape(c.title),
          "</text>\n"});

  // Grid and ticks.
  o += "<g class=\"axes\" stroke=\"#cccccc\" stroke-width=\"1\">\n";
  std::vector<std::pair<double, std::string>> yticks;  // (pixel y, label)
  if (c.log_y) {
    const int decades = static_cast<int>(yhi - ylo);
    const int every = std::max(1, (decades + 7) / 8);
    for (int k = static_cast<int>(ylo); k <= static_cast<int>(yhi); ++k)
      if ((k - static_cast<int>(ylo)) % every == 0) {
        char buf[16];
        std::snprintf(buf, sizeof(buf), "1e%d", k);
        yticks.emplace_back(pyv(k), k == 0 ? "1" : buf);
      }
  } else {
    for (const double v : nice_ticks(ylo, yhi, 6)) yticks.emplace_back(pyv(v), tick_label(v));
  }
  for (const auto& [y, label] : yticks)
    put(o, {"<line x1=\"", num(left), "\" y1=\"", num(y), "\" x2=\"", num(left + pw), "\" y2=\"", num(y), "\"/>\n"});
  const std::vector<double> xticks = nice_ticks(xlo, xhi, 8);
  for (const double v : xticks)
    put(o, {"<line x1=\"", num(px(v)), "\" y1=\"", num(top), "\" x2=\"", num(px(v)), "\" y2=\"", num(top + ph), "\"/>\n"});
  o += "</g>\n";
  put(o, {"<rect x=\"", num(left), "\" y=\"", num(top), "\" width=\"", num(pw), "\" height=\"", num(ph),
          "\" fill=\"none\" stroke=\"black\"/>\n"});
  o += "<g class=\"tick-labels\">\n";
  for (const auto& [y, label] : yticks)
    put(o, {"<text x=\"", num(left - 6), "\" y=\"", num(y + 4), "\" text-anchor=\"end\">", escape(label), "</text>\n"});
  for (const double v : xticks)
    put(o, {"<text x=\"", num(px(v)), "\" y=\"", num(top + ph + 18), "\" text-anchor=\"middle\">", escape(tick_label(v)),
            "</text>\n"});
  o += "</g>\n";
  put(o, {"<text x=\"", num(left + pw / 2), "\" y=\"", num(c.height - 15.0), "\" text-anchor=\"middle\">",
          escape(c.x_label), "</text>\n"});
  put(o, {"<text transform=\"translate(20,", num(top + ph / 2), ") rotate(-90)\" text-anchor=\"middle\">",
          escape(c.y_label), c.log_y ? " (log scale)" : "", "</text>\n"});

  // Series: a polyline per unbroken run of drawable points.
  const auto style = [&](size_t k) {
    std::string st;
    put(st, {"stroke=\"", kColors[k % kColors.size()], "\""});
    const std::string_view dash = kDashes[(k / kColors.size()) % kDashes.size()];
    if (!dash.empty()) put(st, {" stroke-dasharray=\"", dash, "\""});
    return st;
  };
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series& s = c.series[k];
    put(o, {"<g class=\"series\" data-name=\"", escape(s.name), "\" fill=\"", kColors[k % kColors.size()], "\">\n"});
    std::string pts;
    const auto flush = [&] {
      if (!pts.empty()) put(o, {"<polyline fill=\"none\" stroke-width=\"2\" ", style(k), " points=\"", pts, "\"/>\n"});
      pts.clear();
    };
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!drawable(s.x[i], s.y[i], c.log_y)) {
        flush();
        continue;
      }
      const std::string x = num(px(s.x[i])), y = num(py(s.y[i]));
      put(pts, {pts.empty() ? "" : " ", x, ",", y});
      if (c.markers) put(o, {"<circle cx=\"", x, "\" cy=\"", y, "\" r=\"2.5\"/>\n"});
    }
    flush();
    o += "</g>\n";
  }

  // Legend, right of the plot.
  o += "<g class=\"legend\">\n";
  for (size_t k = 0; k < c.series.size(); ++k) {
    const double y = top + 10 + 20.0 * static_cast<double>(k), x0 = left + pw + 15;
    put(o, {"<line x1=\"", num(x0), "\" y1=\"", num(y), "\" x2=\"", num(x0 + 25), "\" y2=\"", num(y), "\" ", style(k),
            " stroke-width=\"2\"/>\n"});
    put(o, {"<text x=\"", num(x0 + 32), "\" y=\"", num(y + 4), "\">", escape(c.series[k].name), "</text>\n"});
  }
  o += "</g>\n</svg>\n";
  return o;
}

void write_line_chart(const std::string& path, const LineChart& chart) {
  write_file_atomic(path, render_line_chart(chart));
}

}  // namespace addnorm::io
