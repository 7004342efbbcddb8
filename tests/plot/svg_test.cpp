// The SVG writer: documents are well-formed XML (every tag closed in order, text escaped), charts
// have both axes with ticks, axis labels, a legend entry per series and reference line, and bad
// input is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "plot/svg.h"
#include "support.h"

using namespace bonsai::plot;

namespace {

// A minimal well-formedness check: tags nest and close in order, attributes are quoted, and no
// bare '<' or '&' appears in text.
::testing::AssertionResult well_formed(const std::string& s) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  while (i < s.size()) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      const std::string ent = s.substr(i, semi == std::string::npos ? 0 : semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;")
        return ::testing::AssertionFailure() << "bare & at " << i;
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      ++i;
      continue;
    }
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    std::string tag = s.substr(i + 1, end - i - 1);
    if (std::count(tag.begin(), tag.end(), '"') % 2) return ::testing::AssertionFailure() << "unbalanced quotes: " << tag;
    if (tag.find('<') != std::string::npos) return ::testing::AssertionFailure() << "'<' inside a tag: " << tag;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1))
        return ::testing::AssertionFailure() << "</" << tag.substr(1) << "> closes " << (stack.empty() ? "nothing" : stack.back());
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
    i = end + 1;
  }
  if (!stack.empty()) return ::testing::AssertionFailure() << "<" << stack.back() << "> never closed";
  return ::testing::AssertionSuccess();
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST(Svg, ChartHasAxesTicksLabelsAndLegend) {
  XYChart c;
  c.title = "ppl <vs> bits & more";
  c.x_label = "bits/weight";
  c.y_label = "perplexity";
  c.log_y = true;
  c.series.push_back({"plans", {1.75, 2.125, 2.6}, {745.4, 727.8, 720.0}, {"stage1", "grid", "b&26"}, false, true, ""});
  c.refs.push_back({"BF16 712.1", 712.1});
  c.refs.push_back({"Q8_0 712.5", 712.5});
  const std::string s = render(c);
  EXPECT_TRUE(well_formed(s));
  EXPECT_EQ(s.rfind("<?xml", 0), 0u);
  EXPECT_NE(s.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(s.find("class=\"axes\""), std::string::npos);
  EXPECT_NE(s.find("class=\"legend\""), std::string::npos);
  EXPECT_NE(s.find(">bits/weight</text>"), std::string::npos);
  EXPECT_NE(s.find(">perplexity</text>"), std::string::npos);
  EXPECT_NE(s.find("ppl &lt;vs&gt; bits &amp; more"), std::string::npos);
  EXPECT_NE(s.find(">b&amp;26</text>"), std::string::npos);
  // Legend: one entry per series and per reference line; each reference also drawn dashed.
  EXPECT_NE(s.find(">plans</text>"), std::string::npos);
  EXPECT_NE(s.find(">BF16 712.1</text>"), std::string::npos);
  EXPECT_EQ(count(s, "stroke-dasharray"), 4);
  EXPECT_EQ(count(s, "<circle"), 3 + 1);  // the points and the legend marker
  // Ticks: several labelled values on each axis (x ticks sit below the axis, y ticks left of it).
  std::smatch m;
  const std::regex tick("text-anchor=\"middle\">([0-9.]+)</text>");
  int xt = 0;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), tick); it != std::sregex_iterator(); ++it) ++xt;
  EXPECT_GE(xt, 4);
  EXPECT_GE(count(s, "text-anchor=\"end\">7"), 2);
}

TEST(Svg, PointsLandInsideThePlotArea) {
  XYChart c;
  c.series.push_back({"s", {0, 10}, {5, -5}, {}, false, true, ""});
  const std::string s = render(c);
  EXPECT_TRUE(well_formed(s));
  const std::regex circle("cx=\"([0-9.\\-]+)\" cy=\"([0-9.\\-]+)\"");
  int n = 0;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), circle); it != std::sregex_iterator(); ++it) {
    const double cx = std::stod((*it)[1]), cy = std::stod((*it)[2]);
    EXPECT_GT(cx, 0);
    EXPECT_LT(cx, c.width);
    EXPECT_GT(cy, 0);
    EXPECT_LT(cy, c.height);
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(Svg, BadInputIsRefused) {
  XYChart c;
  c.series.push_back({"bad", {1, 2}, {1}, {}, false, true, ""});
  EXPECT_NE(bonsai::test::error_of([&] { render(c); }).find("bad"), std::string::npos);
  XYChart l;
  l.log_y = true;
  l.series.push_back({"s", {1, 2}, {0, 3}, {}, false, true, ""});
  EXPECT_NE(bonsai::test::error_of([&] { render(l); }).find("log"), std::string::npos);
  HeatmapFigure f;
  f.panels.push_back({"p", {"a", "b"}, {"x"}, {1.0}});
  EXPECT_NE(bonsai::test::error_of([&] { render(f); }).find("'p'"), std::string::npos);
}

TEST(Svg, HeatmapHasACellPerValueAndAColourBar) {
  HeatmapFigure f;
  f.title = "KLD";
  f.value_label = "mean KLD";
  f.panels.push_back({"PTQ1_0", {"blk.0", "blk.1"}, {"attn_q", "ffn_up", "ffn_down"}, {1e-3, 2e-3, 3e-3, 1e-2, std::nan(""), 0.0}});
  f.panels.push_back({"Q8_0", {"blk.0", "blk.1"}, {"attn_q", "ffn_up", "ffn_down"}, {1e-6, 2e-6, 3e-6, 1e-5, 2e-5, 3e-5}});
  const std::string s = render(f);
  EXPECT_TRUE(well_formed(s));
  EXPECT_EQ(count(s, "<title>"), 12);  // one per cell, each with its value
  EXPECT_EQ(count(s, "fill=\"#dddddd\""), 1);  // the missing value
  EXPECT_NE(s.find(">PTQ1_0</text>"), std::string::npos);
  EXPECT_NE(s.find(">blk.1</text>"), std::string::npos);
  EXPECT_NE(s.find("mean KLD (log colour scale)"), std::string::npos);
  EXPECT_EQ(count(s, "height=\"12\""), 50);  // the colour bar
}

TEST(Svg, NiceTicksAreRoundAndCoverTheRange) {
  for (auto [lo, hi] : {std::pair{0.0, 1.0}, {1.7, 2.9}, {700.0, 760.0}, {-3.0, 12.0}}) {
    const auto t = nice_ticks(lo, hi, 6);
    ASSERT_GE(t.size(), 3u) << lo << ".." << hi;
    ASSERT_LE(t.size(), 13u);
    const double step = t[1] - t[0];
    const double mant = step / std::pow(10.0, std::floor(std::log10(step)));
    EXPECT_TRUE(std::abs(mant - 1) < 1e-9 || std::abs(mant - 2) < 1e-9 || std::abs(mant - 5) < 1e-9) << step;
    EXPECT_GE(t.front(), lo - 1e-9);
    EXPECT_LE(t.back(), hi + 1e-9);
    EXPECT_LT(t.front() - lo, step + 1e-9);
    EXPECT_LT(hi - t.back(), step + 1e-9);
  }
  const auto lt = log_ticks(1e-4, 1.0, 8);
  EXPECT_GE(lt.size(), 4u);
  for (double v : lt) EXPECT_TRUE(v >= 1e-4 * 0.999 && v <= 1.0001);
}
