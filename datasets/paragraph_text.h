// What every extracted paragraph goes through before it may enter a corpus file: UTF-8 repair,
// NFC, whitespace clean-up, and the CJK filters. The character classes are the corpus's rules
// (docs/corpus.md), one definition shared by the builder, the checker and the tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

// append_utf8 (code point -> UTF-8): the one definition, shared with the tokenizers.
#include "runtime/byte_unicode.h"

namespace bonsai::datasets {

// Calls f(code_point, byte_offset, byte_length) for each code point of valid UTF-8 `s`.
// Callers pass only text that went through valid_utf8() (every corpus paragraph does).
template <typename F>
void for_each_code_point(std::string_view s, F&& f) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = uint8_t(s[i]);
    const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
    for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
    f(cp, i, n);
    i += n;
  }
}

// `bytes` with every ill-formed UTF-8 sequence replaced by U+FFFD (one per maximal ill-formed
// subpart, the Unicode "best practice" that Python's errors="replace" also follows).
std::string valid_utf8(std::string_view bytes);

size_t count_code_points(std::string_view s);
// `s` without the whitespace (is_space) at either end; a view into `s`, of valid UTF-8.
std::string_view trim(std::string_view s);

// Unicode White_Space as Python's str.isspace() has it (TAB..CR, U+001C..U+001F, SPACE, U+0085,
// NBSP, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000). The ideographic space
// U+3000 is whitespace too, so it collapses like any other.
bool is_space(uint32_t cp);
// A CJK ideograph, the unit the filters count: U+3400..4DBF, U+4E00..9FFF, U+F900..FAFF,
// U+20000..2FFFF.
bool is_cjk_ideograph(uint32_t cp);
// The characters between which a space is a line-wrap artefact: CJK symbols and punctuation
// (U+3000..303F), the ideograph blocks of the BMP, and half/full-width forms (U+FF00..FFEF).
bool is_cjk_text(uint32_t cp);

size_t count_cjk(std::string_view s);

// The clean-up every paragraph gets, in this order: NFC; NBSP -> space; ZERO WIDTH SPACE
// removed; each run of whitespace -> one space, none at either end; a space with a CJK text
// character on both sides removed.
std::string clean_paragraph(std::string_view raw);

struct ParagraphFilter {
  size_t min_cjk = 8;         // at least this many CJK ideographs
  double min_fraction = 0.3;  // and at least this share of the non-space characters
  bool keeps(std::string_view cleaned) const;
};

// The two filter settings of the corpus: calibration text must be mostly Chinese; the
// evaluation text (a partly translated handbook full of commands and paths) is looser.
inline constexpr ParagraphFilter kCalibrationFilter{8, 0.30};
inline constexpr ParagraphFilter kEvaluationFilter{4, 0.20};

}  // namespace bonsai::datasets
