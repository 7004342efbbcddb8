#include "runtime/unicode_nfc.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

namespace bonsai {

std::string nfc(std::string_view in) {
  // ASCII is always NFC; skipping it keeps English text off the utf8proc path.
  if (std::all_of(in.begin(), in.end(), [](char c) { return uint8_t(c) < 0x80; })) return std::string(in);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()), utf8proc_ssize_t(in.size()), &out,
                   utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    std::free(out);
    return std::string(in);
  }
  std::string s(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return s;
}

}  // namespace bonsai
