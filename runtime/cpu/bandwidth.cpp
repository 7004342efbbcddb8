#include "runtime/cpu/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "runtime/cpu/parallel.h"

#if BONSAI_CPU_AVX2
#include "runtime/cpu/kernels_avx2.h"
#endif

namespace bonsai::cpu {
namespace {

// The sum of p[0..n). A plain loop compiled for the baseline CPU is bound by its adds, not by
// memory: the kernels it judged read faster than it (docs/benchmarks.md, "The roofline changed"),
// and a yardstick that the kernels it judges can beat is no roofline.
uint64_t read_sum(const uint64_t* p, int64_t n) {
#if BONSAI_CPU_AVX2
  if (avx2_usable()) return avx2::read_sum(p, n);
#endif
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) total += p[i];
  return total;
}

// Thread `thread`'s contiguous part [i0, i1) of n words, the same for the first touch and for
// every pass, so pages sit on the reader's NUMA node and no page fault lands inside a timed pass.
void part_of(int64_t n, int thread, int threads, int64_t& i0, int64_t& i1) {
  i0 = n * thread / threads;
  i1 = n * (thread + 1) / threads;
}

}  // namespace

ReadProbe::ReadProbe(size_t bytes)
    : n_(int64_t(std::max<size_t>(bytes / sizeof(uint64_t), 1))),
      buf_(reinterpret_cast<uint64_t*>(pages_.allocate(size_t(n_) * sizeof(uint64_t)))) {
  team::run([&](int thread, int threads) {
    int64_t i0, i1;
    part_of(n_, thread, threads, i0, i1);
    for (int64_t i = i0; i < i1; ++i) buf_[i] = uint64_t(i);
  });
}

double ReadProbe::measure_gbs(int runs, double warm_s) {
  using clock = std::chrono::steady_clock;
  uint64_t sink = 0;
  auto pass = [&] {  // seconds of one pass of all threads over the buffer
    const auto t0 = clock::now();
    uint64_t total = 0;
    team::run([&](int thread, int threads) {
      int64_t i0, i1;
      part_of(n_, thread, threads, i0, i1);
      __atomic_fetch_add(&total, read_sum(buf_ + i0, i1 - i0), __ATOMIC_RELAXED);
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
