// A line chart as a standalone SVG file, for `softhca model --svg` and the plots in docs/: one
// polyline per series, axes with ticks, a legend. Linear or log2 x axis; y starts at 0.
// Deterministic: the same plot gives the same bytes.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace softhca::tools {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), in x order
};

struct Plot {
  std::string title;
  std::string subtitle;
  std::string x_label;
  std::string y_label;
  bool log2_x = false;  // x values > 0, drawn on a log2 scale with a tick at each power of two
  std::vector<PlotSeries> series;
};

std::string render_svg(const Plot& plot);

}  // namespace softhca::tools
