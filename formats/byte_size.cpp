#include "formats/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "formats/error.h"
#include "formats/number.h"

namespace bonsai {

std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  return buf;
}

uint64_t parse_byte_size(const std::string& s, const std::string& what) {
  size_t used = 0;
  const double v = leading_double(s, &used);
  std::string unit;
  for (size_t i = used; i < s.size(); ++i) unit += char(std::tolower(static_cast<unsigned char>(s[i])));
  if (unit.starts_with(" ")) unit.erase(0, 1);
  double scale = 0;
  for (const auto& [names, f] : {std::pair<const char*, double>{",b", 1.0},
                                 {"k,kb,kib", 1024.0},
                                 {"m,mb,mib", 1024.0 * 1024},
                                 {"g,gb,gib", 1024.0 * 1024 * 1024},
                                 {"t,tb,tib", 1024.0 * 1024 * 1024 * 1024}}) {
    const std::string list = std::string(",") + names + ",";
    if (list.find("," + unit + ",") != std::string::npos) scale = f;
  }
  const double bytes = v * scale;
  if (used == 0 || scale == 0 || !std::isfinite(bytes) || bytes < 1 || bytes > 1.8e19)
    throw Error(cat(what, ": '", s, "' is not a size (a number with an optional unit K, M, G or T: 6G, 512MiB)"));
  return uint64_t(bytes);
}

}  // namespace bonsai
