#include "formats/kill_point.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace bonsai {

namespace {

struct Target {
  std::string point;
  long n = 0;  // 0: not armed
};

// Parsed once: "<point>:<n>", the point itself may hold ':' (write:<file>), so n follows the last one.
const Target& target() {
  static const Target t = [] {
    Target r;
    const char* e = std::getenv("BONSAI_TEST_KILL_AT");
    if (!e || !*e) return r;
    const std::string s = e;
    const size_t colon = s.rfind(':');
    char* end = nullptr;
    const long n = colon == std::string::npos ? 0 : std::strtol(s.c_str() + colon + 1, &end, 10);
    if (colon == 0 || colon == std::string::npos || n <= 0 || *end) {
      std::fprintf(stderr, "BONSAI_TEST_KILL_AT='%s' is not <point>:<n> (n >= 1): ignored\n", e);
      return r;
    }
    r.point = s.substr(0, colon);
    r.n = n;
    return r;
  }();
  return t;
}

}  // namespace

bool kill_points_armed() { return target().n > 0; }

void kill_point(std::string_view point) {
  const Target& t = target();
  if (t.n == 0 || point != t.point) return;
  static std::atomic<long> hits{0};
  if (++hits != t.n) return;
  // Said on stderr so a test can tell the hook from a crash; write(2) is all a dying process needs.
  const std::string msg = "BONSAI_TEST_KILL_AT: SIGKILL at " + t.point + ":" + std::to_string(t.n) + "\n";
  [[maybe_unused]] const ssize_t w = ::write(2, msg.data(), msg.size());
  std::raise(SIGKILL);
}

}  // namespace bonsai
