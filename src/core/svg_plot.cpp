#include "core/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/error.h"

namespace rkv {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  if (std::fabs(v) >= 1000 || (v == std::floor(v) && std::fabs(v) < 1e6))
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  else
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

// About five round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo > 0 ? hi - lo : 1.0;
  const double raw = span / 5.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * span; t += step) out.push_back(t);
  return out;
}

// Ten distinct colours (fullkv and the nine methods of a full eval each get their own).
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                         "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

}  // namespace

std::string render_line_plot(const std::vector<PlotSeries>& series, const PlotOptions& o) {
  const double W = 760, H = 440, left = 70, right = 190, top = 40, bottom = 55;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& s : series)
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (o.y_from_zero) y0 = std::min(0.0, y0);
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  y1 += (y1 - y0) * 0.05;
  const double pw = W - left - right, ph = H - top - bottom;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + ph - (y - y0) / (y1 - y0) * ph; };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W) + "\" height=\"" +
                    num(H) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" "
                    "height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + num(W / 2 - right / 2) +
         "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" + escape(o.title) + "</text>\n";
  for (double t : ticks(x0, x1)) {
    svg += "<line x1=\"" + num(px(t)) + "\" y1=\"" + num(top) + "\" x2=\"" + num(px(t)) +
           "\" y2=\"" + num(top + ph) + "\" stroke=\"#eee\"/>\n";
    svg += "<text x=\"" + num(px(t)) + "\" y=\"" + num(top + ph + 16) +
           "\" text-anchor=\"middle\">" + tick_label(t) + "</text>\n";
  }
  for (double t : ticks(y0, y1)) {
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(py(t)) + "\" x2=\"" + num(left + pw) +
           "\" y2=\"" + num(py(t)) + "\" stroke=\"#eee\"/>\n";
    svg += "<text x=\"" + num(left - 6) + "\" y=\"" + num(py(t) + 4) + "\" text-anchor=\"end\">" +
           tick_label(t) + "</text>\n";
  }
  svg += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) +
         "\" height=\"" + num(ph) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + num(H - 12) +
         "\" text-anchor=\"middle\">" + escape(o.x_label) + "</text>\n";
  svg += "<text transform=\"translate(16," + num(top + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape(o.y_label) + "</text>\n";
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    const char* color = kColors[k % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string points;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      points += num(px(s.x[i])) + "," + num(py(s.y[i])) + " ";
      if (o.markers)
        svg += "<circle cx=\"" + num(px(s.x[i])) + "\" cy=\"" + num(py(s.y[i])) +
               "\" r=\"3\" fill=\"" + color + "\"/>\n";
    }
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
           "\" stroke-width=\"1.6\" points=\"" + points + "\"/>\n";
    const double ly = top + 14 + 20 * static_cast<double>(k);
    svg += "<line x1=\"" + num(left + pw + 12) + "\" y1=\"" + num(ly - 4) + "\" x2=\"" +
           num(left + pw + 36) + "\" y2=\"" + num(ly - 4) + "\" stroke=\"" + color +
           "\" stroke-width=\"2\"/>\n";
    svg += "<text x=\"" + num(left + pw + 42) + "\" y=\"" + num(ly) + "\">" + escape(s.name) +
           "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

void write_line_plot(const std::string& path, const std::vector<PlotSeries>& series,
                     const PlotOptions& options) {
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the plot");
  out << render_line_plot(series, options);
}

}  // namespace rkv
