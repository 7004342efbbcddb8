#include "cli/progress.h"

#include <cstdio>

namespace bonsai::cli {

Progress::Progress(std::string label, int64_t total, Unit unit)
    : label_(std::move(label)), total_(total), unit_(unit), start_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t done, const std::string& note) {
  update(done, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), note);
}

void Progress::update(int64_t done, double s, const std::string& note) {
  const auto now = std::chrono::steady_clock::now();
  if (printed_ && done < total_ && now - last_ < std::chrono::seconds(1)) return;
  printed_ = true;
  last_ = now;
  const double eta = done > 0 ? s / double(done) * double(total_ - done) : 0.0;
  const std::string count = unit_ == Unit::bytes ? human_bytes(double(done)) + "/" + human_bytes(double(total_))
                                                 : std::to_string(done) + "/" + std::to_string(total_);
  std::fprintf(stderr, "%s: %s, %.1f s, ETA %.1f s%s%s\n", label_.c_str(), count.c_str(), s, eta,
               note.empty() ? "" : ", ", note.c_str());
}

}  // namespace bonsai::cli
