#include "datasets/troff_text.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

#include "datasets/paragraph_text.h"

namespace bonsai::datasets {
namespace {

// Special characters written \(xx or \[name]: the ones man pages use (groff_char(7)).
const std::unordered_map<std::string_view, std::string_view>& named_chars() {
  static const std::unordered_map<std::string_view, std::string_view> m = {
      {"em", "\u2014"}, {"en", "\u2013"}, {"lq", "\u201c"}, {"rq", "\u201d"}, {"oq", "\u2018"}, {"cq", "\u2019"},
      {"aq", "'"},      {"dq", "\""},     {"bu", "\u2022"}, {"co", "\u00a9"}, {"rg", "\u00ae"}, {"tm", "\u2122"},
      {"hy", "-"},      {"mi", "-"},      {"pl", "+"},      {"eq", "="},      {"ti", "~"},      {"ha", "^"},
      {"rs", "\\"},     {"sl", "/"},      {"ba", "|"},      {"or", "|"},      {"at", "@"},      {"sh", "#"},
      {"Do", "$"},      {"lB", "["},      {"rB", "]"},      {"lC", "{"},      {"rC", "}"},      {"la", "\u27e8"},
      {"ra", "\u27e9"}, {"<=", "\u2264"}, {">=", "\u2265"}, {"!=", "\u2260"}, {"==", "\u2261"}, {"~~", "\u2248"},
      {"+-", "\u00b1"}, {"mu", "\u00d7"}, {"di", "\u00f7"}, {"->", "\u2192"}, {"<-", "\u2190"}, {"ua", "\u2191"},
      {"da", "\u2193"}, {"rA", "\u21d2"}, {"lA", "\u21d0"}, {"de", "\u00b0"}, {"fm", "\u2032"}, {"dg", "\u2020"},
      {"sc", "\u00a7"}, {"ps", "\u00b6"}, {"aa", "\u00b4"}, {"ga", "`"},      {"ul", "_"},      {"ru", "_"},
      {"Fo", "\u00ab"}, {"Fc", "\u00bb"}, {"Eu", "\u20ac"}, {"eu", "\u20ac"}, {"Po", "\u00a3"}, {"Ye", "\u00a5"},
      {"ct", "\u00a2"}, {"pc", "\u00b7"}, {"**", "\u2217"}, {"no", "\u00ac"}, {"if", "\u221e"}, {"sq", "\u25a1"},
      {"ci", "\u25cb"},
  };
  return m;
}

void append_named(std::string& out, std::string_view name) {
  const auto& m = named_chars();
  if (auto it = m.find(name); it != m.end()) {
    out += it->second;
    return;
  }
  // groff's \[uXXXX]: a Unicode code point by number.
  if (name.size() >= 5 && name.size() <= 7 && name[0] == 'u') {
    char* end = nullptr;
    const std::string hex(name.substr(1));
    const unsigned long cp = std::strtoul(hex.c_str(), &end, 16);
    if (end && *end == 0 && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF)) append_utf8(out, uint32_t(cp));
  }
  // Anything else is a glyph we cannot name: it gives nothing.
}

// The strings man(7) (groff's an.tmac) defines for every page.
std::string_view man_string(std::string_view name) {
  if (name == "lq") return "\u201c";
  if (name == "rq") return "\u201d";
  if (name == "R") return "\u00ae";
  if (name == "Tm") return "\u2122";
  return {};
}

// The name after an escape that takes one: x, (xx or [name]. Returns the position after it.
size_t read_name(std::string_view s, size_t i, std::string_view* name) {
  if (i >= s.size()) {
    *name = {};
    return i;
  }
  if (s[i] == '(') {
    const size_t n = std::min<size_t>(2, s.size() - i - 1);
    *name = s.substr(i + 1, n);
    return i + 1 + n;
  }
  if (s[i] == '[') {
    const size_t close = s.find(']', i + 1);
    const size_t end = close == std::string_view::npos ? s.size() : close;
    *name = s.substr(i + 1, end - i - 1);
    return close == std::string_view::npos ? s.size() : close + 1;
  }
  *name = s.substr(i, 1);
  return i + 1;
}

size_t utf8_len(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

struct Resolved {
  std::string text;
  bool join_next = false;  // \c or a trailing backslash: the next line continues this one
};

// One line of troff text with its escapes resolved.
Resolved resolve_escapes(std::string_view s) {
  Resolved r;
  std::string& out = r.text;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c != '\\') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 >= s.size()) {  // a backslash ending the line continues it
      r.join_next = true;
      break;
    }
    const char e = s[i + 1];
    i += 2;
    std::string_view name;
    switch (e) {
      case '"':  // comment to the end of the line
        return r;
      case '#':  // comment that also swallows the newline
      case 'c':  // interrupt: the next line continues this output line
        r.join_next = true;
        return r;
      case '!':  // transparent line: not text
        return r;
      case '-':
        out += '-';
        break;
      case '.':
        out += '.';
        break;
      case '\\':
      case 'e':
      case 'E':
        out += '\\';
        break;
      case ' ':
      case '~':
      case '0':
      case 't':
        out += ' ';
        break;
      case '\'':
        out += "\u00b4";
        break;
      case '`':
        out += '`';
        break;
      case '&':
      case '|':
      case '^':
      case ',':
      case '/':
      case '%':
      case ':':
      case ')':
      case '{':
      case '}':
      case 'a':
      case 'd':
      case 'u':
      case 'r':
      case 'p':
        break;  // zero-width marks and motions
      case '(':
        name = s.substr(i, std::min<size_t>(2, s.size() - i));
        i += name.size();
        append_named(out, name);
        break;
      case '[':
        i = read_name(s, i - 1, &name);
        append_named(out, name);
        break;
      case 'f':
      case 'F':
      case 'm':
      case 'M':
      case '*':
      case 'g':
      case 'k':
      case 'Y':
      case 'V':
      case '$':
      case 'n':
        // fonts, colours, registers, macro arguments: nothing to print; strings: only the
        // ones man(7) itself defines (a page's own .ds strings are not evaluated)
        if (e == 'n' && i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
        i = read_name(s, i, &name);
        if (e == '*') out += man_string(name);
        break;
      case 's': {  // size: \sN, \s±N, \s(NN, \s[N], \s10..\s39
        const bool sign = i < s.size() && (s[i] == '+' || s[i] == '-');
        if (sign) ++i;
        if (i < s.size() && (s[i] == '(' || s[i] == '[')) {
          i = read_name(s, i, &name);
        } else if (i < s.size() && s[i] >= '0' && s[i] <= '9') {
          // one digit; two for an unsigned 10..39 (groff's rule)
          const bool two =
              !sign && s[i] >= '1' && s[i] <= '3' && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9';
          i += two ? 2 : 1;
        }
        break;
      }
      case 'z':  // zero-width: the next character still prints
        break;
      case 'A':
      case 'b':
      case 'B':
      case 'C':
      case 'D':
      case 'h':
      case 'H':
      case 'l':
      case 'L':
      case 'N':
      case 'o':
      case 'R':
      case 'S':
      case 'v':
      case 'w':
      case 'x':
      case 'X':
      case 'Z': {
        // A delimited argument: \h'...' with any delimiter. Only \C'name' prints (a character).
        if (i >= s.size()) break;
        const char delim = s[i];
        const size_t close = s.find(delim, i + 1);
        const size_t end = close == std::string_view::npos ? s.size() : close;
        if (e == 'C') append_named(out, s.substr(i + 1, end - i - 1));
        i = close == std::string_view::npos ? s.size() : close + 1;
        break;
      }
      default: {
        // Not an escape: groff prints the character itself (\< is "<").
        const size_t n = std::min(utf8_len(uint8_t(e)), s.size() - (i - 1));
        out.append(s.substr(i - 1, n));
        i += n - 1;
      }
    }
  }
  return r;
}

bool is_blank(std::string_view s) {
  bool blank = true;
  for_each_code_point(s, [&](uint32_t cp, size_t, size_t) { blank = blank && is_space(cp); });
  return blank;
}

// Macro arguments: blank-separated; a double-quoted argument may hold blanks; an escaped blank
// (`\ `) does not separate.
std::vector<std::string_view> split_args(std::string_view s) {
  std::vector<std::string_view> args;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    if (i >= s.size()) break;
    if (s[i] == '"') {
      const size_t close = s.find('"', i + 1);
      const size_t end = close == std::string_view::npos ? s.size() : close;
      args.push_back(s.substr(i + 1, end - i - 1));
      i = close == std::string_view::npos ? s.size() : close + 1;
      continue;
    }
    const size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\t') i += s[i] == '\\' ? 2 : 1;
    args.push_back(s.substr(start, std::min(i, s.size()) - start));
  }
  return args;
}

bool is_font_macro(std::string_view m) {
  return m == "B" || m == "I" || m == "SM" || m == "SB" || m == "BR" || m == "IR" || m == "RB" || m == "RI" ||
         m == "BI" || m == "IB" || m == "UR" || m == "UE" || m == "MT" || m == "ME";
}

}  // namespace

bool troff_is_so_stub(std::string_view page) {
  size_t i = 0;
  while (i < page.size() && (page[i] == ' ' || page[i] == '\t' || page[i] == '\n' || page[i] == '\r')) ++i;
  return page.substr(i, 4) == ".so ";
}

std::vector<std::string> troff_paragraphs(std::string_view page) {
  std::vector<std::string> paras;
  std::string cur;
  bool have_text = false, join_next = false, drop_tag = false;
  auto flush = [&] {
    if (have_text) paras.push_back(std::move(cur));
    cur.clear();
    have_text = join_next = false;
  };
  auto add_text = [&](const Resolved& r) {
    const std::string_view t = trim(r.text);
    if (!t.empty()) {
      // After \c the line continues the previous one as written, leading blanks included.
      if (have_text && join_next) {
        cur += r.text;
      } else {
        if (have_text) cur += ' ';
        cur += t;
      }
      have_text = true;
    }
    join_next = r.join_next;
  };

  std::string_view block_end;       // ".fi", ".EE" or ".TE" while inside a dropped block
  std::string_view definition_end;  // while inside a .de/.am/.ig body: its closing macro name
  size_t pos = 0;
  while (pos <= page.size()) {
    size_t nl = page.find('\n', pos);
    if (nl == std::string_view::npos) nl = page.size();
    std::string_view line = page.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

    const bool control = !line.empty() && (line[0] == '.' || line[0] == '\'');
    std::string_view macro, rest;
    if (control) {
      size_t i = 1;
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
      macro = line.substr(i, j - i);
      rest = line.substr(j);
      // A request line may end in a comment: it is no argument.
      for (size_t k = 0; k + 1 < rest.size(); ++k) {
        if (rest[k] != '\\') continue;
        if (rest[k + 1] == '"') {
          rest = rest.substr(0, k);
          break;
        }
        ++k;  // an escaped character, e.g. "\\"
      }
    }
    if (!definition_end.empty()) {
      if (control && macro == definition_end) definition_end = {};
      continue;
    }
    if (line.starts_with(".\\\"") || line.starts_with("'\\\"") || line.starts_with("\\\"")) continue;

    if (control) {
      if (macro.empty() || macro.starts_with("\\\"")) continue;  // "." alone does nothing
      if (macro == "de" || macro == "de1" || macro == "am" || macro == "ig") {
        const auto args = split_args(rest);
        const size_t end_arg = macro == "ig" ? 0 : 1;
        definition_end = args.size() > end_arg ? args[end_arg] : std::string_view(".");
        continue;
      }
      if (!block_end.empty()) {
        if (macro == block_end) block_end = {};
        continue;
      }
      if (macro == "nf" || macro == "EX" || macro == "TS") {
        flush();
        block_end = macro == "nf" ? "fi" : macro == "EX" ? "EE" : "TE";
        continue;
      }
      if (is_font_macro(macro)) {
        if (drop_tag) {
          drop_tag = false;
          continue;
        }
        const bool spaced = macro == "B" || macro == "I" || macro == "SM" || macro == "SB";
        std::string joined;
        for (std::string_view a : split_args(rest)) {
          if (spaced && !joined.empty()) joined += ' ';
          joined += a;
        }
        add_text(resolve_escapes(joined));
        continue;
      }
      flush();
      if (macro == "TP") drop_tag = true;
      continue;
    }

    if (!block_end.empty()) continue;
    if (drop_tag) {
      drop_tag = false;
      continue;
    }
    if (is_blank(line)) {
      flush();
      continue;
    }
    add_text(resolve_escapes(line));
  }
  flush();
  return paras;
}

}  // namespace bonsai::datasets
