#include "runtime/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "formats/error.h"

namespace bonsai {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& source) : source_(source) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  // MATCH_INVALID_UTF: malformed UTF-8 in the input is skipped over instead of failing the match.
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
  if (!code_) fail(source, "pre-tokenizer regex does not compile at offset ", err_off, ": ", pcre2_message(err));
  // JIT is an optimisation only: without it pcre2_match interprets the same pattern.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(code_); }

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
  std::vector<std::string_view> words;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  if (!md) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(code_, subject, text.size(), pos, 0, md.get(), nullptr);
    // A very long match can exhaust the JIT's small default stack; the interpreter keeps its
    // backtracking state on the heap.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_JIT, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail(source_, "pre-tokenizer regex failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t start = ov[0], end = ov[1];
    if (start > pos) words.push_back(text.substr(pos, start - pos));
    // Our patterns never match empty; should one, step over a byte rather than loop.
    if (end == start) end = start + 1;
    words.push_back(text.substr(start, end - start));
    pos = end;
  }
  if (pos < text.size()) words.push_back(text.substr(pos));
  return words;
}

}  // namespace bonsai
