// One error type for everything that reads or writes a file: the message always names the file
// and says what is wrong, so the CLI can print it as is.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace bonsai {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Error("path: what") — the form every reader uses.
template <typename... Args>
[[noreturn]] void fail(const std::string& path, const Args&... what) {
  throw Error(cat(path, ": ", what...));
}

}  // namespace bonsai
