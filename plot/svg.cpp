#include "plot/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "formats/error.h"

namespace bonsai::plot {

namespace {

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
const char* const kRefColors[] = {"#555555", "#999999", "#bbbb55"};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// A tick label: as few digits as tell the ticks apart.
std::string tick_text(double v, double step) {
  char b[32];
  const int dec = step >= 1 ? 0 : std::min(6, int(std::ceil(-std::log10(step) - 1e-9)));
  std::snprintf(b, sizeof b, "%.*f", dec, v);
  return b;
}

std::string text(double x, double y, const std::string& s, const char* anchor = "start", const char* extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\"" + extra + ">" +
         xml_escape(s) + "</text>\n";
}

std::string line(double x1, double y1, double x2, double y2, const std::string& style) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\" " + style +
         "/>\n";
}

std::string header(int w, int h) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         std::to_string(w) + "\" height=\"" + std::to_string(h) + "\" viewBox=\"0 0 " + std::to_string(w) + " " +
         std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"" + std::to_string(w) +
         "\" height=\"" + std::to_string(h) + "\" fill=\"white\"/>\n";
}

// Viridis-like ramp, t in [0, 1].
std::string ramp(double t) {
  static const double stops[][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, int(t));
  const double f = t - i;
  char b[16];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", int(stops[i][0] + f * (stops[i + 1][0] - stops[i][0])),
                int(stops[i][1] + f * (stops[i + 1][1] - stops[i][1])), int(stops[i][2] + f * (stops[i + 1][2] - stops[i][2])));
  return b;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::vector<double> log_ticks(double lo, double hi, int target) {
  std::vector<double> all;
  for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); ++e)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, e);
      if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12)) all.push_back(v);
    }
  // Within less than a decade, 1-2-5 gives too few: fall back to linear ticks over the range.
  if (int(all.size()) < 3) return nice_ticks(lo, hi, target);
  std::vector<double> t;
  const size_t every = std::max<size_t>(1, all.size() / size_t(std::max(1, target)));
  for (size_t i = 0; i < all.size(); i += every) t.push_back(all[i]);
  return t;
}

std::string render(const XYChart& c) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : c.series) {
    if (s.x.size() != s.y.size() || (!s.labels.empty() && s.labels.size() != s.x.size()))
      throw Error(cat("plot series '", s.name, "': ", s.x.size(), " x values, ", s.y.size(), " y values, ",
                      s.labels.size(), " labels"));
    for (size_t i = 0; i < s.x.size(); ++i) {
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  }
  for (const RefLine& r : c.refs) y0 = std::min(y0, r.y), y1 = std::max(y1, r.y);
  if (!std::isfinite(x0)) x0 = 0, x1 = 1;
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (c.log_y && y0 <= 0) throw Error(cat("plot '", c.title, "': a log y axis needs values above 0 (lowest ", y0, ")"));
  // Margins around the data so points and labels sit inside the frame.
  const double dx = x1 > x0 ? (x1 - x0) * 0.08 : 0.5;
  x0 -= dx, x1 += dx;
  if (c.log_y) {
    const double r = y1 > y0 ? std::pow(y1 / y0, 0.08) : 1.05;
    y0 /= r, y1 *= r;
  } else {
    const double dy = y1 > y0 ? (y1 - y0) * 0.08 : std::max(1.0, std::abs(y0) * 0.05);
    y0 -= dy, y1 += dy;
  }
  const double L = 80, R = 200, T = 40, B = 60, W = c.width, H = c.height;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) {
    const double f = c.log_y ? (std::log(y) - std::log(y0)) / (std::log(y1) - std::log(y0)) : (y - y0) / (y1 - y0);
    return T + (1 - f) * (H - T - B);
  };
  std::string o = header(c.width, c.height);
  o += text(W / 2, 22, c.title, "middle", " font-size=\"14\" font-weight=\"bold\"");
  // Axes, ticks and grid.
  o += "<g class=\"axes\">\n";
  o += line(L, H - B, W - R, H - B, "stroke=\"black\"");
  o += line(L, T, L, H - B, "stroke=\"black\"");
  const auto xt = nice_ticks(x0, x1, 8);
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double v : xt) {
    o += line(px(v), H - B, px(v), H - B + 5, "stroke=\"black\"");
    o += line(px(v), T, px(v), H - B, "stroke=\"#eeeeee\"");
    o += text(px(v), H - B + 18, tick_text(v, xstep), "middle");
  }
  const auto yt = c.log_y ? log_ticks(y0, y1, 6) : nice_ticks(y0, y1, 6);
  // Log ticks are uneven: label each with the precision its neighbours need.
  const double ystep = yt.size() > 1 ? std::abs(yt[1] - yt[0]) : 1;
  for (double v : yt) {
    o += line(L - 5, py(v), L, py(v), "stroke=\"black\"");
    o += line(L, py(v), W - R, py(v), "stroke=\"#eeeeee\"");
    o += text(L - 8, py(v) + 4, tick_text(v, c.log_y ? std::min(ystep, v / 10) : ystep), "end");
  }
  o += text((L + W - R) / 2, H - 15, c.x_label, "middle");
  o += "<text x=\"18\" y=\"" + num((T + H - B) / 2) + "\" transform=\"rotate(-90 18 " + num((T + H - B) / 2) +
       ")\" text-anchor=\"middle\">" + xml_escape(c.y_label) + "</text>\n</g>\n";
  // Reference lines, then the series.
  double ly = T + 10;
  const double lx = W - R + 15;
  o += "<g class=\"legend\">\n";
  std::string body;
  for (size_t i = 0; i < c.refs.size(); ++i) {
    const std::string col = kRefColors[i % 3];
    const RefLine& r = c.refs[i];
    body += line(L, py(r.y), W - R, py(r.y), "stroke=\"" + col + "\" stroke-dasharray=\"6,4\"");
    o += line(lx, ly, lx + 24, ly, "stroke=\"" + col + "\" stroke-dasharray=\"6,4\"");
    o += text(lx + 30, ly + 4, r.name);
    ly += 18;
  }
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const std::string col = s.color.empty() ? kPalette[i % 8] : s.color;
    if (s.line && s.x.size() > 1) {
      body += "<polyline fill=\"none\" stroke=\"" + col + "\" stroke-width=\"1.5\" points=\"";
      for (size_t k = 0; k < s.x.size(); ++k) body += num(px(s.x[k])) + "," + num(py(s.y[k])) + " ";
      body += "\"/>\n";
    }
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (s.markers)
        body += "<circle cx=\"" + num(px(s.x[k])) + "\" cy=\"" + num(py(s.y[k])) + "\" r=\"4\" fill=\"" + col + "\"/>\n";
      if (!s.labels.empty()) body += text(px(s.x[k]) + 7, py(s.y[k]) - 6, s.labels[k], "start", " font-size=\"10\"");
    }
    if (s.line) o += line(lx, ly, lx + 24, ly, "stroke=\"" + col + "\" stroke-width=\"1.5\"");
    if (s.markers) o += "<circle cx=\"" + num(lx + 12) + "\" cy=\"" + num(ly) + "\" r=\"4\" fill=\"" + col + "\"/>\n";
    o += text(lx + 30, ly + 4, s.name);
    ly += 18;
  }
  o += "</g>\n<g class=\"data\">\n" + body + "</g>\n</svg>\n";
  return o;
}

std::string render(const HeatmapFigure& f) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  size_t max_rows = 0, max_label = 4;
  for (const Heatmap& p : f.panels) {
    if (p.values.size() != p.rows.size() * p.cols.size())
      throw Error(cat("heatmap '", p.title, "': ", p.values.size(), " values for ", p.rows.size(), " x ", p.cols.size()));
    max_rows = std::max(max_rows, p.rows.size());
    for (const auto& r : p.rows) max_label = std::max(max_label, r.size());
    for (double v : p.values) {
      if (std::isnan(v) || (f.log_scale && v <= 0)) continue;
      const double t = f.log_scale ? std::log10(v) : v;
      lo = std::min(lo, t), hi = std::max(hi, t);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi <= lo) hi = lo + 1;
  const double cell_w = 44, cell_h = 20, left = 20 + 7.0 * double(max_label), top = 100, gap = 30;
  double x = left;
  std::vector<double> panel_x;
  for (const Heatmap& p : f.panels) {
    panel_x.push_back(x);
    x += double(p.cols.size()) * cell_w + gap;
  }
  const int W = int(x + 110), H = int(top + double(max_rows) * cell_h + 110);
  std::string o = header(W, H);
  o += text(W / 2.0, 22, f.title, "middle", " font-size=\"14\" font-weight=\"bold\"");
  for (size_t pi = 0; pi < f.panels.size(); ++pi) {
    const Heatmap& p = f.panels[pi];
    const double x0 = panel_x[pi];
    o += "<g class=\"panel\">\n";
    o += text(x0 + double(p.cols.size()) * cell_w / 2, 48, p.title, "middle", " font-weight=\"bold\"");
    for (size_t c = 0; c < p.cols.size(); ++c)
      o += "<text transform=\"translate(" + num(x0 + (double(c) + 0.5) * cell_w) + " " + num(top - 4) +
           ") rotate(-30)\" font-size=\"10\">" + xml_escape(p.cols[c]) + "</text>\n";
    for (size_t r = 0; r < p.rows.size(); ++r) {
      if (pi == 0) o += text(x0 - 6, top + (double(r) + 0.7) * cell_h, p.rows[r], "end", " font-size=\"11\"");
      for (size_t c = 0; c < p.cols.size(); ++c) {
        const double v = p.values[r * p.cols.size() + c];
        std::string fill = "#dddddd";
        if (!std::isnan(v)) fill = ramp(((f.log_scale ? (v > 0 ? std::log10(v) : lo) : v) - lo) / (hi - lo));
        o += "<rect x=\"" + num(x0 + double(c) * cell_w) + "\" y=\"" + num(top + double(r) * cell_h) + "\" width=\"" +
             num(cell_w - 1) + "\" height=\"" + num(cell_h - 1) + "\" fill=\"" + fill + "\"><title>" +
             xml_escape(p.rows[r] + " " + p.cols[c]) + ": " + (std::isnan(v) ? "-" : tick_text(v, 1e-6)) +
             "</title></rect>\n";
      }
    }
    o += "</g>\n";
  }
  // Colour bar with its scale.
  const double by = top + double(max_rows) * cell_h + 30, bx = left, bw = std::min(400.0, W - left - 40);
  o += "<g class=\"legend\">\n";
  for (int i = 0; i < 50; ++i)
    o += "<rect x=\"" + num(bx + bw * i / 50) + "\" y=\"" + num(by) + "\" width=\"" + num(bw / 50 + 0.5) +
         "\" height=\"12\" fill=\"" + ramp(i / 49.0) + "\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double t = lo + (hi - lo) * i / 4;
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", f.log_scale ? std::pow(10.0, t) : t);
    o += text(bx + bw * i / 4, by + 26, b, "middle", " font-size=\"10\"");
  }
  o += text(bx + bw / 2, by + 44, f.value_label + (f.log_scale ? " (log colour scale)" : ""), "middle");
  o += "</g>\n</svg>\n";
  return o;
}

}  // namespace bonsai::plot
