#include "datasets/text_stats.h"

#include <openssl/evp.h>

#include <memory>

#include "datasets/paragraph_text.h"
#include "formats/atomic_file.h"
#include "formats/error.h"

namespace bonsai::datasets {

std::string sha256_hex(std::string_view bytes) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1 || EVP_DigestFinal_ex(ctx.get(), md, &n) != 1)
    throw Error("sha256: OpenSSL digest failed");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    s += hex[md[i] >> 4];
    s += hex[md[i] & 15];
  }
  return s;
}

TextStats text_stats(std::string_view text) {
  TextStats s;
  s.sha256 = sha256_hex(text);
  s.bytes = text.size();
  s.characters = count_code_points(text);
  for (char c : text) s.paragraphs += c == '\n';
  s.cjk_characters = count_cjk(text);
  return s;
}

TextStats write_paragraphs(const std::string& path, const std::vector<std::string>& paragraphs) {
  std::string text;
  size_t n = 0;
  for (const auto& p : paragraphs) n += p.size() + 1;
  text.reserve(n);
  for (const auto& p : paragraphs) {
    text += p;
    text += '\n';
  }
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
  return text_stats(text);
}

}  // namespace bonsai::datasets
