// Overlap between calibration and evaluation text at the level of character windows.
//
// Paragraph de-duplication is not enough: a source can embed another text with different
// paragraph breaks (fortunes-zh carries a copy of the Debian Reference), so a held-out text
// can leak into calibration without any paragraph being equal. Every window of W consecutive
// code points of the evaluation paragraphs is indexed (XXH3-64 of its UTF-8 bytes, confirmed
// byte for byte on a hit); a calibration paragraph overlaps when it contains one of them, or
// when it equals an evaluation paragraph shorter than W.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bonsai::datasets {

inline constexpr size_t kOverlapWindow = 30;

class OverlapIndex {
 public:
  explicit OverlapIndex(size_t window = kOverlapWindow);  // window >= 1

  // Adds one evaluation paragraph (one line of an evaluation file, no '\n').
  void add(std::string_view eval_paragraph);

  struct Hit {
    std::string window;     // the shared text (the whole paragraph for a short exact match)
    size_t eval_paragraph;  // index, in add() order, of an evaluation paragraph holding it
  };
  // The first window of `paragraph` that occurs in the evaluation text, if any.
  std::optional<Hit> find(std::string_view paragraph) const;

  size_t window() const { return window_; }
  size_t paragraphs() const { return texts_.size(); }
  size_t windows() const { return index_.size(); }

 private:
  struct Loc {
    uint32_t paragraph, offset, bytes;
  };
  std::string_view text(const Loc& l) const;
  size_t window_;
  std::vector<std::string> texts_;
  std::unordered_multimap<uint64_t, Loc> index_;
};

struct OverlapFinding {
  std::string calib_file;
  size_t calib_line = 0;  // 1-based
  std::string eval_file;
  size_t eval_line = 0;  // 1-based
  std::string window;
};

struct OverlapReport {
  size_t window = kOverlapWindow;
  size_t calib_paragraphs = 0, eval_paragraphs = 0, eval_windows = 0;
  std::vector<OverlapFinding> findings;  // one per overlapping calibration paragraph
};

// Reads the files (UTF-8, one paragraph per line) and reports every calibration line that
// overlaps the evaluation text. Error naming the file when one cannot be read.
OverlapReport check_overlap(const std::vector<std::string>& calib_files, const std::vector<std::string>& eval_files,
                            size_t window = kOverlapWindow);

// The lines of a text file, without their '\n' (a last line without one counts too; empty
// lines are kept so line numbers stay right).
std::vector<std::string> read_lines(const std::string& path);

}  // namespace bonsai::datasets
