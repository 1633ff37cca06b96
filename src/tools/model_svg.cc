#include "tools/model_svg.h"
#include "tools/xml_escape.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace softhca::tools {

namespace {

constexpr double kWidth = 760;
constexpr double kHeight = 460;
constexpr double kLeft = 80;
constexpr double kRight = 200;  // room for the legend
constexpr double kTop = 60;
constexpr double kBottom = 60;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
constexpr size_t kColorCount = sizeof kColors / sizeof kColors[0];

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A short tick label: integers without decimals, others with up to 3 significant digits.
std::string label(double v) {
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9 && std::fabs(v) < 1e9) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  }
  return buf;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `ticks` intervals over span.
double nice_step(double span, int ticks) {
  const double raw = span / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nice * mag;
}

}  // namespace

std::string render_svg(const Plot& plot) {
  double xmin = std::numeric_limits<double>::max();
  double xmax = std::numeric_limits<double>::lowest();
  double ymax = 0;
  for (const PlotSeries& s : plot.series) {
    for (const auto& [x, y] : s.points) {
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymax = std::max(ymax, y);
    }
  }
  if (xmin > xmax) {
    xmin = 0;
    xmax = 1;
  }
  const bool log_x = plot.log2_x && xmin > 0;
  auto tx = [&](double x) { return log_x ? std::log2(x) : x; };
  double x0 = tx(xmin);
  double x1 = tx(xmax);
  if (x1 <= x0) x1 = x0 + 1;
  if (ymax <= 0) ymax = 1;
  const double ystep = nice_step(ymax, 5);
  const double ytop = std::ceil(ymax * 1.05 / ystep) * ystep;
  const double pw = kWidth - kLeft - kRight;
  const double ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (tx(x) - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + ph - y / ytop * ph; };

  std::string o;
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" + num(kHeight) +
       "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(kLeft) + "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" + xml_escape(plot.title) + "</text>\n";
  if (!plot.subtitle.empty()) {
    o += "<text x=\"" + num(kLeft) + "\" y=\"42\" fill=\"#555\">" + xml_escape(plot.subtitle) + "</text>\n";
  }
  // Grid and y ticks.
  for (double y = 0; y <= ytop + ystep / 2; y += ystep) {
    o += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(py(y)) + "\" x2=\"" + num(kLeft + pw) + "\" y2=\"" + num(py(y)) +
         "\" stroke=\"#e5e5e5\"/>\n";
    o += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(py(y) + 4) + "\" text-anchor=\"end\">" + label(y) + "</text>\n";
  }
  // x ticks: each power of two on a log2 axis; nice steps on a linear one.
  std::vector<double> xticks;
  if (log_x) {
    for (double e = std::ceil(x0); e <= x1 + 1e-9; e += 1) xticks.push_back(std::exp2(e));
  } else {
    const double step = nice_step(xmax - xmin > 0 ? xmax - xmin : 1, 6);
    for (double x = std::ceil(xmin / step) * step; x <= xmax + step / 1e6; x += step) xticks.push_back(x);
  }
  for (double x : xticks) {
    o += "<line x1=\"" + num(px(x)) + "\" y1=\"" + num(kTop + ph) + "\" x2=\"" + num(px(x)) + "\" y2=\"" +
         num(kTop + ph + 5) + "\" stroke=\"black\"/>\n";
    o += "<text x=\"" + num(px(x)) + "\" y=\"" + num(kTop + ph + 19) + "\" text-anchor=\"middle\">" + label(x) + "</text>\n";
  }
  // Axes and labels.
  o += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(kLeft) + "\" y2=\"" + num(kTop + ph) +
       "\" stroke=\"black\"/>\n";
  o += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kTop + ph) + "\" x2=\"" + num(kLeft + pw) + "\" y2=\"" +
       num(kTop + ph) + "\" stroke=\"black\"/>\n";
  o += "<text x=\"" + num(kLeft + pw / 2) + "\" y=\"" + num(kHeight - 18) + "\" text-anchor=\"middle\">" +
       xml_escape(plot.x_label) + (log_x ? " (log scale)" : "") + "</text>\n";
  o += "<text transform=\"translate(20 " + num(kTop + ph / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       xml_escape(plot.y_label) + "</text>\n";
  // Series and legend.
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& s = plot.series[i];
    const char* color = kColors[i % kColorCount];
    std::string pts;
    for (const auto& [x, y] : s.points) pts += num(px(x)) + "," + num(py(y)) + " ";
    if (!pts.empty()) pts.pop_back();
    o += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    for (const auto& [x, y] : s.points) {
      o += "<circle cx=\"" + num(px(x)) + "\" cy=\"" + num(py(y)) + "\" r=\"3\" fill=\"" + color + "\"/>\n";
    }
    const double ly = kTop + 10 + 20.0 * static_cast<double>(i);
    const double lx = kLeft + pw + 16;
    o += "<line x1=\"" + num(lx) + "\" y1=\"" + num(ly) + "\" x2=\"" + num(lx + 24) + "\" y2=\"" + num(ly) +
         "\" stroke=\"" + color + "\" stroke-width=\"2\"/>\n";
    o += "<text x=\"" + num(lx + 30) + "\" y=\"" + num(ly + 4) + "\">" + xml_escape(s.name) + "</text>\n";
  }
  o += "</svg>\n";
  return o;
}

}  // namespace softhca::tools
