// Calibration/evaluation overlap at the level of character windows (docs/corpus.md, "Overlap").
#include "datasets/overlap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <unordered_set>

#include "datasets/paragraph_text.h"
#include "formats/error.h"
#include "formats/json_file.h"
#include "support.h"

namespace bonsai::datasets {
namespace {

// 40 distinct ideographs: a text long enough for windows, with no repeats inside.
const std::string kEval = "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉戌亥金木水火土日月星天地人山川河海风云雨";

std::string substr_cp(const std::string& s, size_t from, size_t n) {
  std::string out;
  size_t i = 0;
  for_each_code_point(s, [&](uint32_t cp, size_t, size_t) {
    if (i >= from && i < from + n) append_utf8(out, cp);
    ++i;
  });
  return out;
}

TEST(Overlap, SharedThirtyCharacterWindowIsFlagged) {
  OverlapIndex idx;
  idx.add(kEval);
  EXPECT_EQ(idx.windows(), 40u - 30u + 1u);
  // A calibration paragraph that embeds 30 consecutive characters of the evaluation text.
  const std::string leak = "前言：" + substr_cp(kEval, 5, 30) + "。后记";
  const auto hit = idx.find(leak);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->window, substr_cp(kEval, 5, 30));
  EXPECT_EQ(hit->eval_paragraph, 0u);
  // 29 shared characters are not a window; nor is the same text broken by a space.
  EXPECT_FALSE(idx.find("前言：" + substr_cp(kEval, 5, 29) + "。后记"));
  EXPECT_FALSE(idx.find(substr_cp(kEval, 0, 15) + " " + substr_cp(kEval, 15, 25)));
  EXPECT_FALSE(idx.find("完全无关的一段文字，长度也超过了三十个字符，但没有任何共同的窗口。"));
}

TEST(Overlap, ShortParagraphsMatchOnlyWhole) {
  OverlapIndex idx;
  idx.add("第 6 章 维护和更新");  // shorter than a window
  EXPECT_TRUE(idx.find("第 6 章 维护和更新"));
  EXPECT_FALSE(idx.find("第 6 章 维护和更新。"));
  EXPECT_FALSE(idx.find("第 6 章"));
  // A short paragraph is not a window of a longer one.
  OverlapIndex idx2;
  idx2.add(kEval);
  EXPECT_FALSE(idx2.find(substr_cp(kEval, 0, 10)));
}

TEST(Overlap, WindowLengthIsAParameter) {
  OverlapIndex idx(5);
  idx.add("abcdefgh");
  EXPECT_TRUE(idx.find("xxcdefgxx"));
  EXPECT_FALSE(idx.find("xxcdefxx"));
}

TEST(Overlap, CheckReportsFileAndLine) {
  const auto dir = test::scratch_dir();
  const auto calib = (dir / "calib-a.txt").string();
  const auto eval = (dir / "eval-a.txt").string();
  {
    std::ofstream e(eval);
    e << "短的评估段落\n" << kEval << "\n";
    std::ofstream c(calib);
    c << "无关的段落\n\n"
      << "引子" << substr_cp(kEval, 10, 30) << "\n短的评估段落\n";
  }
  const auto r = check_overlap({calib}, {eval});
  EXPECT_EQ(r.window, 30u);
  EXPECT_EQ(r.eval_paragraphs, 2u);
  EXPECT_EQ(r.calib_paragraphs, 3u);  // the empty line is no paragraph
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].calib_line, 3u);
  EXPECT_EQ(r.findings[0].eval_line, 2u);
  EXPECT_EQ(r.findings[0].eval_file, eval);
  EXPECT_EQ(r.findings[0].window, substr_cp(kEval, 10, 30));
  EXPECT_EQ(r.findings[1].calib_line, 4u);
  EXPECT_EQ(r.findings[1].eval_line, 1u);
  EXPECT_THROW(check_overlap({(dir / "missing.txt").string()}, {eval}), Error);
}

// The published corpus, checked two ways: the hashed index against a plain set of every
// 30-character window as a string. They must flag the same calibration lines.
TEST(Overlap, SharedCorporaIndexAgreesWithExactWindowSet) {
  BONSAI_REQUIRE_SHARED("corpora/zh/MANIFEST.json");
  const auto dir = test::shared_file("corpora/zh");
  std::vector<std::string> calib, eval;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".txt") && name.starts_with("calib-")) calib.push_back(e.path().string());
    if (name.ends_with(".txt") && name.starts_with("eval-")) eval.push_back(e.path().string());
  }
  ASSERT_FALSE(calib.empty());
  ASSERT_FALSE(eval.empty());
  std::sort(calib.begin(), calib.end());
  const auto report = check_overlap(calib, eval);

  std::unordered_set<std::string> windows, short_paras;
  for (const auto& f : eval) {
    for (const auto& line : read_lines(f)) {
      const size_t n = count_code_points(line);
      if (n < 30) short_paras.insert(line);
      for (size_t i = 0; i + 30 <= n; ++i) windows.insert(substr_cp(line, i, 30));
    }
  }
  std::set<std::pair<std::string, size_t>> exact, hashed;
  for (const auto& f : calib) {
    const auto lines = read_lines(f);
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& line = lines[i];
      const size_t n = count_code_points(line);
      bool hit = n < 30 && short_paras.count(line);
      // Windows by byte offsets of code points (substr_cp per window would be quadratic).
      std::vector<size_t> off;
      for_each_code_point(line, [&](uint32_t, size_t at, size_t) { off.push_back(at); });
      off.push_back(line.size());
      for (size_t k = 0; !hit && k + 30 <= n; ++k) hit = windows.count(line.substr(off[k], off[k + 30] - off[k])) > 0;
      if (hit) exact.insert({f, i + 1});
    }
  }
  for (const auto& fnd : report.findings) hashed.insert({fnd.calib_file, fnd.calib_line});
  EXPECT_EQ(hashed, exact);

  // A corpus whose manifest says it was built with the window check must have no overlap.
  // (The corpus published before this check existed has a few: the builder now drops them.)
  const auto manifest = read_json_file((dir / "MANIFEST.json").string());
  const bool checked = manifest.contains("filters") && manifest["filters"].contains("overlap_window_chars");
  if (checked) {
    EXPECT_TRUE(report.findings.empty()) << report.findings.size() << " calibration paragraphs overlap, first "
                                         << report.findings[0].calib_file << ":" << report.findings[0].calib_line;
  } else {
    std::cout << "[ NOTE     ] " << dir.string() << " predates the window check: " << report.findings.size()
              << " calibration paragraphs share a 30-character window with evaluation text\n";
  }
}

}  // namespace
}  // namespace bonsai::datasets
