#include "datasets/fortune_text.h"

#include <algorithm>
#include <array>

#include "datasets/paragraph_text.h"

namespace bonsai::datasets {
namespace {

std::string strip_ansi_colours(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
      size_t j = i + 2;
      while (j < s.size() && ((s[j] >= '0' && s[j] <= '9') || s[j] == ';')) ++j;
      if (j < s.size() && s[j] == 'm') {
        i = j;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

bool ends_with_sentence_punctuation(std::string_view line) {
  static constexpr std::array<std::string_view, 7> kPunct = {"。", "！", "？", "，", "；", "、", "："};
  return std::any_of(kPunct.begin(), kPunct.end(), [&](std::string_view p) { return line.ends_with(p); });
}

}  // namespace

std::vector<std::string> fortune_items(std::string_view file) {
  const std::string text = strip_ansi_colours(file);
  std::vector<std::string> items;
  std::string cur;
  auto end_entry = [&] {
    if (!cur.empty()) items.push_back(std::move(cur));
    cur.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view raw = std::string_view(text).substr(pos, nl - pos);
    pos = nl + 1;
    if (raw == "%") {
      end_entry();
      continue;
    }
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    cur += line;
    if (!ends_with_sentence_punctuation(line)) cur += ' ';
  }
  end_entry();
  return items;
}

}  // namespace bonsai::datasets
