// A pre-tokenizer regex (PCRE2, UTF + Unicode properties, JIT when available) that cuts a text
// into the words BPE then works on, as Hugging Face's Split(behavior = Isolated) does.
#pragma once
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace bonsai {

class RegexSplitter {
 public:
  // Throws Error("<source>: ...") when the pattern does not compile.
  RegexSplitter(const std::string& pattern, const std::string& source);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // The matches of the pattern, in order, plus every run of bytes between two matches as its
  // own word (only bytes that are not valid UTF-8 are left unmatched by our patterns), so the
  // words always cover the whole text. Views into `text`.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
  std::string source_;
};

}  // namespace bonsai
