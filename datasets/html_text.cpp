#include "datasets/html_text.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "datasets/paragraph_text.h"

namespace bonsai::datasets {
namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }
std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = lower(c);
  return r;
}

const std::unordered_set<std::string_view> kBlock = {"p",  "div",   "h1",   "h2", "h3",         "h4",      "h5", "h6",
                                                     "li", "dt",    "dd",   "br", "blockquote", "section", "ul", "ol",
                                                     "dl", "title", "body", "td", "th",         "tr"};
const std::unordered_set<std::string_view> kSkip = {"script", "style",  "pre",    "table",    "head",
                                                    "header", "aside",  "nav",    "noscript", "footer",
                                                    "button", "select", "object", "svg"};
const std::unordered_set<std::string_view> kVoid = {"br",   "img", "meta",  "link",  "input",  "hr",    "area",
                                                    "base", "col", "embed", "param", "source", "track", "wbr"};

// Named references: the ones HTML pages of this kind use. `legacy`: also recognized without the
// closing ';' (HTML's legacy names).
struct Named {
  std::string_view text;
  bool legacy;
};
const std::unordered_map<std::string_view, Named>& named_refs() {
  static const std::unordered_map<std::string_view, Named> m = {
      {"amp", {"&", true}},          {"lt", {"<", true}},          {"gt", {">", true}},
      {"quot", {"\"", true}},        {"nbsp", {"\u00a0", true}},   {"copy", {"\u00a9", true}},
      {"reg", {"\u00ae", true}},     {"apos", {"'", false}},       {"trade", {"\u2122", false}},
      {"hellip", {"\u2026", false}}, {"mdash", {"\u2014", false}}, {"ndash", {"\u2013", false}},
      {"lsquo", {"\u2018", false}},  {"rsquo", {"\u2019", false}}, {"ldquo", {"\u201c", false}},
      {"rdquo", {"\u201d", false}},  {"laquo", {"\u00ab", true}},  {"raquo", {"\u00bb", true}},
      {"middot", {"\u00b7", true}},  {"bull", {"\u2022", false}},  {"times", {"\u00d7", true}},
      {"divide", {"\u00f7", true}},  {"deg", {"\u00b0", true}},    {"plusmn", {"\u00b1", true}},
      {"sect", {"\u00a7", true}},    {"para", {"\u00b6", true}},   {"shy", {"\u00ad", true}},
      {"ensp", {"\u2002", false}},   {"emsp", {"\u2003", false}},  {"thinsp", {"\u2009", false}},
      {"zwj", {"\u200d", false}},    {"zwnj", {"\u200c", false}},  {"lrm", {"\u200e", false}},
      {"rlm", {"\u200f", false}},    {"euro", {"\u20ac", false}},  {"pound", {"\u00a3", true}},
      {"yen", {"\u00a5", true}},     {"cent", {"\u00a2", true}},   {"larr", {"\u2190", false}},
      {"rarr", {"\u2192", false}},   {"uarr", {"\u2191", false}},  {"darr", {"\u2193", false}},
      {"harr", {"\u2194", false}},   {"le", {"\u2264", false}},    {"ge", {"\u2265", false}},
      {"ne", {"\u2260", false}},     {"minus", {"\u2212", false}},
  };
  return m;
}

// &#128;..&#159; name Windows-1252 characters in HTML, not C1 controls.
constexpr std::array<uint16_t, 32> kCp1252 = {0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,
                                              0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x8D,   0x017D, 0x8F,
                                              0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
                                              0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};

void append_numeric(std::string& out, uint64_t cp) {
  if (cp >= 0x80 && cp <= 0x9F) cp = kCp1252[cp - 0x80];
  if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    out += "\uFFFD";
    return;
  }
  // Controls and noncharacters are not text: they give nothing.
  const bool control =
      (cp >= 0x01 && cp <= 0x08) || cp == 0x0B || (cp >= 0x0E && cp <= 0x1F) || (cp >= 0x7F && cp <= 0x9F);
  const bool nonchar = (cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE;
  if (control || nonchar) return;
  append_utf8(out, uint32_t(cp));
}

// One start or end tag: its lower-case name, class and id, where it ends.
struct Tag {
  std::string name;
  std::string cls, id;
  bool self_closing = false;
  size_t end = 0;  // position after '>'
};

// Parses the tag whose name starts at `i` (after '<' or '</'). Returns false when no '>' ends
// it (the '<' is then text).
bool parse_tag(std::string_view s, size_t i, Tag* t) {
  size_t j = i;
  while (j < s.size() && !is_ascii_space(s[j]) && s[j] != '/' && s[j] != '>' && s[j] != 0) ++j;
  t->name = lower(s.substr(i, j - i));
  while (j < s.size()) {
    while (j < s.size() && (is_ascii_space(s[j]) || s[j] == '/')) {
      t->self_closing = s[j] == '/';
      ++j;
    }
    if (j >= s.size()) return false;
    if (s[j] == '>') {
      t->end = j + 1;
      return true;
    }
    t->self_closing = false;
    const size_t a = j;
    while (j < s.size() && !is_ascii_space(s[j]) && s[j] != '/' && s[j] != '>' && s[j] != '=') ++j;
    if (j == a) ++j;  // a stray '=': skip it
    const std::string attr = lower(s.substr(a, j - a));
    size_t k = j;
    while (k < s.size() && is_ascii_space(s[k])) ++k;
    if (k < s.size() && s[k] == '=') {
      ++k;
      while (k < s.size() && is_ascii_space(s[k])) ++k;
      std::string_view value;
      if (k < s.size() && (s[k] == '"' || s[k] == '\'')) {
        const size_t close = s.find(s[k], k + 1);
        if (close == std::string_view::npos) return false;
        value = s.substr(k + 1, close - k - 1);
        j = close + 1;
      } else {
        size_t e = k;
        while (e < s.size() && !is_ascii_space(s[e]) && s[e] != '>') ++e;
        value = s.substr(k, e - k);
        j = e;
      }
      // The last of repeated attributes counts.
      if (attr == "class") t->cls = decode_html_entities(value);
      if (attr == "id") t->id = decode_html_entities(value);
    } else if (attr == "class" || attr == "id") {
      (attr == "class" ? t->cls : t->id).clear();
    }
  }
  return false;
}

bool has_class(const std::string& cls, const std::vector<std::string>& wanted) {
  size_t i = 0;
  while (i < cls.size()) {
    while (i < cls.size() && is_ascii_space(cls[i])) ++i;
    size_t j = i;
    while (j < cls.size() && !is_ascii_space(cls[j])) ++j;
    if (j > i && std::find(wanted.begin(), wanted.end(), cls.substr(i, j - i)) != wanted.end()) return true;
    i = j;
  }
  return false;
}

// Position of the end tag `</name\s*>` (case-insensitive) at or after i, or npos.
size_t find_raw_end(std::string_view s, size_t i, std::string_view name) {
  while ((i = s.find("</", i)) != std::string_view::npos) {
    size_t j = i + 2, k = 0;
    while (k < name.size() && j < s.size() && lower(s[j]) == name[k]) ++j, ++k;
    if (k == name.size()) {
      while (j < s.size() && is_ascii_space(s[j])) ++j;
      if (j < s.size() && s[j] == '>') return i;
    }
    i += 2;
  }
  return std::string_view::npos;
}

class Extractor {
 public:
  explicit Extractor(const HtmlRules& rules) : rules_(rules) {}

  std::vector<std::string> run(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
      const size_t lt = s.find('<', i);
      if (lt == std::string_view::npos) {
        text(s.substr(i));
        break;
      }
      text(s.substr(i, lt - i));
      i = markup(s, lt);
    }
    flush();
    return std::move(paras_);
  }

 private:
  // Handles the markup at s[lt] == '<'; returns where the text resumes.
  size_t markup(std::string_view s, size_t lt) {
    const std::string_view rest = s.substr(lt);
    if (rest.starts_with("<!--")) {
      const size_t close = s.find("-->", lt + 4);
      return close == std::string_view::npos ? s.size() : close + 3;
    }
    if (rest.starts_with("<!") || rest.starts_with("<?") ||
        (rest.starts_with("</") && rest.size() > 2 && !is_alpha(rest[2]))) {
      const size_t close = s.find('>', lt + 2);
      return close == std::string_view::npos ? s.size() : close + 1;
    }
    Tag t;
    if (rest.starts_with("</") && parse_tag(s, lt + 2, &t)) {
      end_tag(t.name);
      return t.end;
    }
    if (rest.size() > 1 && is_alpha(rest[1]) && parse_tag(s, lt + 1, &t)) {
      start_tag(t);
      if (t.self_closing) {
        end_tag(t.name);
        return t.end;
      }
      if (t.name == "script" || t.name == "style") {
        // Raw text: nothing in it is markup. It is dropped (both are skipped elements).
        const size_t close = find_raw_end(s, t.end, t.name);
        if (close == std::string_view::npos) return s.size();
        return close;  // the end tag is handled as markup next
      }
      return t.end;
    }
    text(s.substr(lt, 1));  // a '<' that opens nothing is text
    return lt + 1;
  }

  void start_tag(const Tag& t) {
    if (kVoid.count(t.name)) {
      if (t.name == "br") flush();
      return;
    }
    const bool skip =
        kSkip.count(t.name) || has_class(t.cls, rules_.skip_classes) || t.id == "banner" || t.id == "title";
    open_.push_back({t.name, skip});
    skip_depth_ += skip;
    if (kBlock.count(t.name)) flush();
  }

  void end_tag(const std::string& name) {
    if (kVoid.count(name)) return;
    for (size_t k = open_.size(); k-- > 0;) {
      if (open_[k].first != name) continue;
      for (size_t m = k; m < open_.size(); ++m) skip_depth_ -= open_[m].second;
      open_.resize(k);
      break;
    }
    if (kBlock.count(name)) flush();
  }

  void text(std::string_view t) {
    if (t.empty() || skip_depth_ > 0) return;
    cur_ += decode_html_entities(t);
  }

  void flush() {
    if (!cur_.empty()) paras_.push_back(std::move(cur_));
    cur_.clear();
  }

  const HtmlRules& rules_;
  std::vector<std::pair<std::string, bool>> open_;  // open elements: name, dropped
  size_t skip_depth_ = 0;                           // open dropped elements
  std::string cur_;
  std::vector<std::string> paras_;
};

}  // namespace

HtmlRules libreoffice_help_rules() { return {{"bookmark_search", "embedded_search", "code", "codeblock", "switch"}}; }

HtmlRules debian_handbook_rules() {
  return {{"programlisting", "screen", "table", "informaltable", "docnav", "toc", "index"}};
}

std::string decode_html_entities(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t amp = s.find('&', i);
    if (amp == std::string_view::npos) {
      out.append(s.substr(i));
      break;
    }
    out.append(s.substr(i, amp - i));
    i = amp + 1;
    if (i < s.size() && s[i] == '#') {
      const bool hex = i + 1 < s.size() && (s[i + 1] == 'x' || s[i + 1] == 'X');
      size_t j = i + 1 + hex;
      uint64_t cp = 0;
      const size_t digits_at = j;
      while (j < s.size()) {
        const char c = s[j];
        int d = c >= '0' && c <= '9' ? c - '0' : -1;
        if (hex && d < 0 && lower(c) >= 'a' && lower(c) <= 'f') d = lower(c) - 'a' + 10;
        if (d < 0) break;
        cp = std::min<uint64_t>(cp * (hex ? 16 : 10) + uint64_t(d), 0x110000);  // saturate: invalid anyway
        ++j;
      }
      if (j == digits_at) {
        out += '&';
        continue;
      }
      append_numeric(out, cp);
      i = j + (j < s.size() && s[j] == ';');
      continue;
    }
    size_t j = i;
    while (j < s.size() && j - i < 32 && !is_ascii_space(s[j]) && s[j] != '<' && s[j] != '&' && s[j] != '#' &&
           s[j] != ';')
      ++j;
    const std::string_view name = s.substr(i, j - i);
    const auto& refs = named_refs();
    if (j < s.size() && s[j] == ';') {
      if (auto it = refs.find(name); it != refs.end()) {
        out += it->second.text;
        i = j + 1;
        continue;
      }
    }
    // Without ';' only the legacy names count, as the longest prefix of the run.
    bool done = false;
    for (size_t n = std::min<size_t>(name.size(), 6); n > 0 && !done; --n) {
      if (auto it = refs.find(name.substr(0, n)); it != refs.end() && it->second.legacy) {
        out += it->second.text;
        i += n;
        done = true;
      }
    }
    if (!done) out += '&';
  }
  return out;
}

std::vector<std::string> html_paragraphs(std::string_view html, const HtmlRules& rules) {
  return Extractor(rules).run(html);
}

}  // namespace bonsai::datasets
