// A small SVG line-chart writer: one chart, one polyline per series, axes with ticks, axis titles,
// a title and a legend. The y axis can be logarithmic (ticks at powers of ten); on a log axis,
// points that are not finite and > 0 are left out (a series breaks there), on a linear axis the
// points that are not finite.
//
// The output is a standalone SVG 1.1 document (well-formed XML; text is escaped). Series get
// distinct colors from a fixed palette, and dash patterns once the palette is used up.
#pragma once

#include <string>
#include <vector>

namespace addnorm::io {

struct Series {
  std::string name;       // legend entry
  std::vector<double> x;  // as many as y
  std::vector<double> y;
};

struct LineChart {
  std::string title;
  std::string x_label, y_label;
  bool log_y = false;
  bool markers = true;  // a dot on every point
  std::vector<Series> series;
  int width = 800, height = 500;  // pixels, >= 200 each
};

// The SVG text of a chart. Throws Error ("[render_line_chart] ...") when a series' x and y
// differ in length, the size is too small, or no series has a point that can be drawn.
std::string render_line_chart(const LineChart& chart);

// Writes render_line_chart(chart) to path atomically (write_file_atomic).
void write_line_chart(const std::string& path, const LineChart& chart);

}  // namespace addnorm::io
