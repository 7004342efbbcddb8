#include "quantize/provenance.h"

#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "formats/error.h"

namespace bonsai::quant {

namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) throw Error("OpenSSL: SHA-256 unavailable");
  }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx_.get(), p, n); }
  void update_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path, "cannot read");
    std::vector<char> buf(1 << 20);
    while (f) {
      f.read(buf.data(), std::streamsize(buf.size()));
      update(buf.data(), size_t(f.gcount()));
    }
    if (f.bad()) fail(path, "read error");
  }
  std::string hex() {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), d, &n);
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (unsigned int i = 0; i < n; ++i) {
      s += digits[d[i] >> 4];
      s += digits[d[i] & 15];
    }
    return s;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

}  // namespace

std::string sha256_files(const std::vector<std::string>& files) {
  Sha256 h;
  for (const auto& f : files) h.update_file(f);
  return h.hex();
}

std::string source_sha256(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return sha256_files({path});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  if (ec) fail(path, "cannot list the folder: ", ec.message());
  std::sort(names.begin(), names.end());
  Sha256 listing;
  for (const auto& n : names) {
    const std::string line = sha256_files({(fs::path(path) / n).string()}) + "  " + n + "\n";
    listing.update(line.data(), line.size());
  }
  return listing.hex();
}

}  // namespace bonsai::quant
