#include "cli/progress.h"

#include <cstdio>

namespace bonsai::cli {

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)), total_(total), start_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t done, const std::string& note) {
  update(done, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), note);
}

void Progress::update(int64_t done, double s, const std::string& note) {
  const auto now = std::chrono::steady_clock::now();
  if (printed_ && done < total_ && now - last_ < std::chrono::seconds(1)) return;
  printed_ = true;
  last_ = now;
  const double eta = done > 0 ? s / double(done) * double(total_ - done) : 0.0;
  std::fprintf(stderr, "%s: %lld/%lld, %.1f s, ETA %.1f s%s%s\n", label_.c_str(), static_cast<long long>(done),
               static_cast<long long>(total_), s, eta, note.empty() ? "" : ", ", note.c_str());
}

}  // namespace bonsai::cli
