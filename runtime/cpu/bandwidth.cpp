#include "runtime/cpu/bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>

namespace bonsai::cpu {

double measure_read_bandwidth_gbs(size_t bytes, int runs) {
  const size_t n = std::max<size_t>(bytes / sizeof(uint64_t), 1);
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  // First touch by the thread that will read each part (same static split), so pages sit on its
  // NUMA node and no page fault lands inside a timed pass.
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = i;

  double best = 0.0;
  uint64_t sink = 0;
  for (int r = 0; r < std::max(runs, 1); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; ++i) total += buf[i];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += total;
    if (s > 0) best = std::max(best, double(n * sizeof(uint64_t)) / s / 1e9);
  }
  // The sums must be used, or the passes could be optimized away.
  volatile uint64_t keep = sink;
  (void)keep;
  return best;
}

}  // namespace bonsai::cpu
