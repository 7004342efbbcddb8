// The numbers a corpus manifest records for each text file, and the writer that produces them.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bonsai::datasets {

struct TextStats {
  std::string sha256;  // lower-case hex
  uint64_t bytes = 0;
  uint64_t characters = 0;      // Unicode code points
  uint64_t paragraphs = 0;      // lines ('\n' count)
  uint64_t cjk_characters = 0;  // is_cjk_ideograph()
};

std::string sha256_hex(std::string_view bytes);  // OpenSSL libcrypto (EVP)
TextStats text_stats(std::string_view text);

// Writes the paragraphs one per line ('\n' after each, UTF-8) atomically; returns the stats of
// what was written.
TextStats write_paragraphs(const std::string& path, const std::vector<std::string>& paragraphs);

}  // namespace bonsai::datasets
