#include "datasets/overlap.h"

#include <xxhash.h>

#include "datasets/paragraph_text.h"
#include "formats/error.h"
#include "formats/mapped_file.h"

namespace bonsai::datasets {
namespace {

// Byte offset of every code point of s, plus s.size() at the end.
std::vector<uint32_t> code_point_offsets(std::string_view s) {
  std::vector<uint32_t> off;
  off.reserve(s.size() + 1);
  for_each_code_point(s, [&](uint32_t, size_t at, size_t) { off.push_back(uint32_t(at)); });
  off.push_back(uint32_t(s.size()));
  return off;
}

uint64_t hash(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

}  // namespace

OverlapIndex::OverlapIndex(size_t window) : window_(window < 1 ? 1 : window) {}

std::string_view OverlapIndex::text(const Loc& l) const {
  return std::string_view(texts_[l.paragraph]).substr(l.offset, l.bytes);
}

void OverlapIndex::add(std::string_view eval_paragraph) {
  if (eval_paragraph.size() > UINT32_MAX) throw Error("evaluation paragraph longer than 4 GiB: not a text corpus");
  const uint32_t p = uint32_t(texts_.size());
  texts_.emplace_back(eval_paragraph);
  const std::string_view s = texts_.back();
  const std::vector<uint32_t> off = code_point_offsets(s);
  const size_t n = off.size() - 1;  // code points
  if (n < window_) {
    // Too short for a window: only the paragraph as a whole can be shared.
    index_.emplace(hash(s), Loc{p, 0, uint32_t(s.size())});
    return;
  }
  for (size_t i = 0; i + window_ <= n; ++i) {
    const Loc l{p, off[i], off[i + window_] - off[i]};
    index_.emplace(hash(text(l)), l);
  }
}

std::optional<OverlapIndex::Hit> OverlapIndex::find(std::string_view paragraph) const {
  auto lookup = [&](std::string_view piece) -> std::optional<Hit> {
    auto [b, e] = index_.equal_range(hash(piece));
    for (auto it = b; it != e; ++it)
      if (text(it->second) == piece) return Hit{std::string(piece), it->second.paragraph};
    return std::nullopt;
  };
  const std::vector<uint32_t> off = code_point_offsets(paragraph);
  const size_t n = off.size() - 1;
  if (n < window_) {
    // A short paragraph can only equal a short evaluation paragraph; a window never fits.
    // Index entries shorter than a window are whole short evaluation paragraphs, so a hit here
    // is an exact paragraph match.
    return lookup(paragraph);
  }
  for (size_t i = 0; i + window_ <= n; ++i)
    if (auto hit = lookup(paragraph.substr(off[i], off[i + window_] - off[i]))) return hit;
  // A long paragraph equal to a short evaluation one is impossible; equal long paragraphs share
  // every window, so they were found above.
  return std::nullopt;
}

std::vector<std::string> read_lines(const std::string& path) {
  const auto f = MappedFile::open(path);
  const std::string_view s(reinterpret_cast<const char*>(f->data()), f->size());
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string_view::npos) nl = s.size();
    lines.emplace_back(s.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return lines;
}

OverlapReport check_overlap(const std::vector<std::string>& calib_files, const std::vector<std::string>& eval_files,
                            size_t window) {
  OverlapReport r;
  OverlapIndex index(window);
  r.window = index.window();
  std::vector<std::pair<size_t, size_t>> where;  // eval paragraph -> (file, line)
  for (size_t f = 0; f < eval_files.size(); ++f) {
    const auto lines = read_lines(eval_files[f]);
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].empty()) continue;
      index.add(valid_utf8(lines[i]));
      where.emplace_back(f, i + 1);
    }
  }
  r.eval_paragraphs = index.paragraphs();
  r.eval_windows = index.windows();
  for (const std::string& file : calib_files) {
    const auto lines = read_lines(file);
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].empty()) continue;
      ++r.calib_paragraphs;
      if (auto hit = index.find(valid_utf8(lines[i]))) {
        const auto [ef, el] = where[hit->eval_paragraph];
        r.findings.push_back({file, i + 1, eval_files[ef], el, hit->window});
      }
    }
  }
  return r;
}

}  // namespace bonsai::datasets
