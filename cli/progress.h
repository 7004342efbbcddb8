// The one progress line every long-running command prints (stderr): done/total, elapsed time,
// ETA from the mean time per step so far, and any note the caller adds (peak RSS, ...). A line a
// step, but at most one a second (the first and the last step always print), so that a command
// of many quick steps does not flood a log.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "formats/byte_size.h"  // human_bytes, which the callers' notes use

namespace bonsai::cli {

class Progress {
 public:
  // What done and total count: steps ("3/28") or bytes ("1.23 GiB/29.50 GiB").
  enum class Unit { steps, bytes };
  Progress(std::string label, int64_t total, Unit unit = Unit::steps);
  // Prints "label: done/total, 12.3 s, ETA 45.6 s[, note]", timed from construction.
  void update(int64_t done, const std::string& note = "");
  // The same with the elapsed time measured by the caller (steps that began elsewhere).
  void update(int64_t done, double elapsed_s, const std::string& note);

 private:
  std::string label_;
  int64_t total_;
  Unit unit_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;  // when the last line was printed
  bool printed_ = false;
};

}  // namespace bonsai::cli
