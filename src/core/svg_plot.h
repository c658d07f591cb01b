// A minimal SVG line chart (benchmarks' latency plots, eval's accuracy-against-budget curves).
#pragma once

#include <string>
#include <vector>

namespace rkv {

struct PlotSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
};

struct PlotOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool y_from_zero = true;
  bool markers = false;  // draw a dot at every point (for short series)
};

// The chart as an SVG document: axes with ticks, one polyline per series, a legend.
std::string render_line_plot(const std::vector<PlotSeries>& series, const PlotOptions& options);
// Writes it to `path`; throws rkv::Error when the file cannot be written.
void write_line_plot(const std::string& path, const std::vector<PlotSeries>& series,
                     const PlotOptions& options);

}  // namespace rkv
