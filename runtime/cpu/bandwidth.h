// How fast this machine streams memory into the cores: the yardstick for memory-bound kernels
// (token generation reads every weight once per token).
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/cpu/huge_pages.h"

namespace bonsai::cpu {

// The probe's default buffer: STREAM's rule, at least four times the last-level cache (sysconf's
// L3, else L2), and at least 256 MB. A buffer that fits in the cache is read partly from it: on a
// 2-core Intel Xeon VM whose L3 is 300 MB, a 64 MB buffer read 46-50 GB/s when 256 MB read 23-26
// (docs/benchmarks.md, "The probe's buffer at four times the L3"), and a model's weights, read
// once per token, stream from memory.
size_t default_probe_bytes();

// A buffer of `bytes` (far larger than the caches) that all the runtime's threads (team::run)
// sum, each its own contiguous part. It is allocated and first touched once: `bonsai bench`
// probes before and after every repetition, and with a 256 MB buffer allocated, faulted in and
// freed at each probe the decode step right after it ran 100-180 ms late on the 2-core machine;
// with a kept buffer it does not (docs/benchmarks.md). Its pages are the weight copies' kind
// (huge_pages.h).
class ReadProbe {
 public:
  explicit ReadProbe(size_t bytes = default_probe_bytes());
  // The buffer's size: resident from construction on (it counts in the process's RSS).
  size_t bytes() const { return size_t(n_) * sizeof(uint64_t); }
  // Read bandwidth in GB/s (1e9 bytes/s): the best of `runs` passes (alternately without and with
  // software prefetch, bandwidth.cpp), after untimed passes for warm_s seconds. Threads that have
  // idled read slowly at first on the 2-core Zen 5 (a VM), and a probe taken cold flatters whatever
  // is judged against it: bench_matmul, which probed right after one thread had built the
  // matrices, read 53-57 GB/s in minutes when `bonsai bench`'s probes (taken after its threads' own
  // work) read 75-80 (docs/benchmarks.md, "A cold probe").
  double measure_gbs(int runs = 5, double warm_s = 0.05);

 private:
  int64_t n_;
  HugePageArena pages_;
  uint64_t* buf_;
};

}  // namespace bonsai::cpu
