#include "runtime/cpu/bandwidth.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "runtime/cpu/parallel.h"

#if BONSAI_CPU_AVX2
#include "runtime/cpu/kernels_avx512.h"
#endif

namespace bonsai::cpu {
namespace {

// The sum of p[0..n), each line asked for `ahead` bytes early when ahead > 0, with the widest
// loads this CPU has. A plain loop compiled for the baseline CPU is bound by its adds, not by
// memory: the kernels it judged read faster than it (docs/benchmarks.md, "The roofline changed"),
// and a yardstick that the kernels it judges can beat is no roofline.
uint64_t read_sum(const uint64_t* p, int64_t n, int64_t ahead) {
#if BONSAI_CPU_AVX2
  if (avx512_usable()) return avx512::read_sum(p, n, ahead);
  if (avx2_usable()) return avx2::read_sum(p, n, ahead);
#endif
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) total += p[i];
  return total;
}

// The probe's passes alternate between no software prefetch and this distance: which of the two
// reads faster depends on the machine (docs/benchmarks.md, "The probe's read loop on Intel"), and
// the yardstick is the faster.
constexpr int64_t kProbeAhead = 8192;

}  // namespace

size_t default_probe_bytes() {
  long cache = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (cache <= 0) cache = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return std::max(size_t(256) << 20, 4 * size_t(std::max(cache, 0L)));
}

ReadProbe::ReadProbe(size_t bytes)
    : n_(int64_t(std::max<size_t>(bytes / sizeof(uint64_t), 1))),
      buf_(reinterpret_cast<uint64_t*>(pages_.allocate(size_t(n_) * sizeof(uint64_t)))) {
  // Each thread touches first the part it reads in every pass (team::part), so pages sit on the
  // reader's NUMA node and no page fault lands inside a timed pass.
  team::run([&](int thread, int threads) {
    for (auto [i, end] = team::part(n_, thread, threads); i < end; ++i) buf_[i] = uint64_t(i);
  });
}

double ReadProbe::measure_gbs(int runs, double warm_s) {
  using clock = std::chrono::steady_clock;
  uint64_t sink = 0;
  int passes = 0;
  auto pass = [&] {  // seconds of one pass of all threads over the buffer
    const int64_t ahead = passes++ % 2 ? kProbeAhead : 0;
    const auto t0 = clock::now();
    uint64_t total = 0;
    team::run([&](int thread, int threads) {
      const team::Part p = team::part(n_, thread, threads);
      __atomic_fetch_add(&total, read_sum(buf_ + p.begin, p.end - p.begin, ahead), __ATOMIC_RELAXED);
    });
    sink += total;
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  for (const auto w0 = clock::now(); std::chrono::duration<double>(clock::now() - w0).count() < warm_s;) pass();
  double best = 0.0;
  for (int r = 0; r < std::max(runs, 1); ++r)
    if (const double s = pass(); s > 0) best = std::max(best, double(n_) * sizeof(uint64_t) / s / 1e9);
  // The sums must be used, or the passes could be optimized away.
  volatile uint64_t keep = sink;
  (void)keep;
  return best;
}

}  // namespace bonsai::cpu
