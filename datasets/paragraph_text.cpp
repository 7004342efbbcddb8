#include "datasets/paragraph_text.h"

#include <algorithm>
#include <vector>

#include "runtime/unicode_nfc.h"

namespace bonsai::datasets {

std::string valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t b = uint8_t(bytes[i]);
    if (b < 0x80) {
      out += char(b);
      ++i;
      continue;
    }
    // Expected length and the range the second byte must fall in (it excludes overlongs,
    // surrogates and code points past U+10FFFF); later bytes are always 80..BF.
    size_t n = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
      n = 2;
    else if (b == 0xE0)
      n = 3, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC)
      n = 3;
    else if (b == 0xED)
      n = 3, hi = 0x9F;
    else if (b >= 0xEE && b <= 0xEF)
      n = 3;
    else if (b == 0xF0)
      n = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      n = 4;
    else if (b == 0xF4)
      n = 4, hi = 0x8F;
    size_t k = 1;
    if (n) {
      for (; k < n && i + k < bytes.size(); ++k) {
        const uint8_t c = uint8_t(bytes[i + k]);
        if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
      }
    }
    if (n && k == n) {
      out.append(bytes.substr(i, n));
    } else {
      out += "\xEF\xBF\xBD";  // the maximal ill-formed subpart [i, i+k) becomes one U+FFFD
    }
    i += k;
  }
  return out;
}

std::string_view trim(std::string_view s) {
  size_t b = s.size(), e = 0;
  for_each_code_point(s, [&](uint32_t cp, size_t off, size_t n) {
    if (is_space(cp)) return;
    b = std::min(b, off);
    e = off + n;
  });
  return b >= e ? std::string_view{} : s.substr(b, e - b);
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

bool is_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xF900 && cp <= 0xFAFF) ||
         (cp >= 0x20000 && cp <= 0x2FFFF);
}

bool is_cjk_text(uint32_t cp) {
  return (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFF00 && cp <= 0xFFEF);
}

size_t count_cjk(std::string_view s) {
  size_t n = 0;
  for_each_code_point(s, [&](uint32_t cp, size_t, size_t) { n += is_cjk_ideograph(cp); });
  return n;
}

std::string clean_paragraph(std::string_view raw) {
  const std::string s = nfc(valid_utf8(raw));
  // Collapse: whitespace runs become one space; ZERO WIDTH SPACE is dropped without ending a run.
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  bool pending_space = false;
  for_each_code_point(s, [&](uint32_t cp, size_t, size_t) {
    if (cp == 0x200B) return;
    if (is_space(cp)) {
      pending_space = !cps.empty();
      return;
    }
    if (pending_space) cps.push_back(' ');
    pending_space = false;
    cps.push_back(cp);
  });
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    // After collapsing, a space has a non-space on both sides.
    if (cps[i] == ' ' && is_cjk_text(cps[i - 1]) && is_cjk_text(cps[i + 1])) continue;
    append_utf8(out, cps[i]);
  }
  return out;
}

bool ParagraphFilter::keeps(std::string_view cleaned) const {
  size_t cjk = 0, non_space = 0;
  for_each_code_point(cleaned, [&](uint32_t cp, size_t, size_t) {
    cjk += is_cjk_ideograph(cp);
    non_space += !is_space(cp);
  });
  if (non_space == 0) return false;
  return cjk >= min_cjk && double(cjk) >= min_fraction * double(non_space);
}

}  // namespace bonsai::datasets
