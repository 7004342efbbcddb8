// The one SVG writer every bonsai plot uses: an x/y chart (scatter and/or lines, labelled points,
// horizontal reference lines, axes with ticks, axis labels, a legend) and heatmap panels (rows x
// columns of values on a colour scale, one panel per variable, with a colour bar). Output is a
// complete standalone SVG document; text is XML-escaped; no external fonts or scripts.
#pragma once
#include <string>
#include <vector>

namespace bonsai::plot {

struct Series {
  std::string name;                 // legend entry
  std::vector<double> x, y;         // same length
  std::vector<std::string> labels;  // empty, or one per point (drawn beside it)
  bool line = false;                // join the points in the order given
  bool markers = true;
  std::string color;  // empty: the palette's next colour
};

struct RefLine {
  std::string name;  // shown at the right end and in the legend
  double y = 0;
};

struct XYChart {
  std::string title, x_label, y_label;
  bool log_y = false;  // ratios (perplexities) read evenly on a log scale
  std::vector<Series> series;
  std::vector<RefLine> refs;
  int width = 760, height = 480;
};

// Error when a series' x, y and labels disagree in length, or log_y meets a value <= 0.
std::string render(const XYChart& c);

struct Heatmap {
  std::string title;                         // the panel's caption
  std::vector<std::string> rows, cols;       // row and column names
  std::vector<double> values;                // rows x cols, row-major; NaN: no value (grey)
};

struct HeatmapFigure {
  std::string title, value_label;  // value_label: what the colour shows
  bool log_scale = true;           // colour by log10(value); values <= 0 take the lowest colour
  std::vector<Heatmap> panels;     // side by side, one shared colour scale
};

std::string render(const HeatmapFigure& f);

// About `target` round tick values (1, 2, 5 x 10^k steps) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target);
// Tick values for a log axis over [lo, hi] (lo > 0): 1-2-5 per decade, thinned to about `target`.
std::vector<double> log_ticks(double lo, double hi, int target);
std::string xml_escape(const std::string& s);

}  // namespace bonsai::plot
