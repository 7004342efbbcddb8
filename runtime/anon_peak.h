// The peak of the process's anonymous memory (RssAnon: the heap and anonymous maps, which the
// OOM killer counts), as getrusage's peak RSS cannot tell it: that one also counts the pages of
// memory-mapped files — a streamed source model, finished blocks read back — which the kernel
// drops at will. Linux keeps no peak of RssAnon, so a thread samples /proc/self/status every
// 20 ms while the sampler lives; a peak shorter than that can be missed, which docs/scale.md
// states beside every figure.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>

namespace bonsai {

// RssAnon now, in bytes (0 where /proc/self/status has none).
int64_t anon_rss_bytes();

class AnonPeak {
 public:
  AnonPeak();
  ~AnonPeak();
  AnonPeak(const AnonPeak&) = delete;
  AnonPeak& operator=(const AnonPeak&) = delete;

  int64_t overall() const;  // the largest sample since construction
  // The largest sample since the previous lap (or construction), including one taken now; the
  // next lap starts.
  int64_t lap();

 private:
  void sample();
  std::atomic<int64_t> overall_{0}, lap_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace bonsai
