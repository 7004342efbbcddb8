#include "runtime/anon_peak.h"

#include <chrono>
#include <cstdio>
#include <cstring>

namespace bonsai {

int64_t anon_rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long long kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "RssAnon:", 8) == 0) {
      std::sscanf(line + 8, "%lld", &kb);
      break;
    }
  std::fclose(f);
  return int64_t(kb) * 1024;
}

AnonPeak::AnonPeak() {
  sample();
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      sample();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
}

AnonPeak::~AnonPeak() {
  stop_ = true;
  thread_.join();
}

void AnonPeak::sample() {
  const int64_t v = anon_rss_bytes();
  for (std::atomic<int64_t>* a : {&overall_, &lap_}) {
    int64_t cur = a->load();
    while (v > cur && !a->compare_exchange_weak(cur, v)) {
    }
  }
}

int64_t AnonPeak::overall() const { return overall_.load(); }

int64_t AnonPeak::lap() {
  sample();
  return lap_.exchange(anon_rss_bytes());
}

}  // namespace bonsai
