#include "formats/text_file.h"

#include <fstream>
#include <sstream>

#include "formats/atomic_file.h"
#include "formats/error.h"

namespace bonsai {

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot read the file");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail(path, "read error");
  return ss.str();
}

void write_text_file(const std::string& path, std::string_view text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace bonsai
