// How fast this machine streams memory into the cores: the yardstick for memory-bound kernels
// (token generation reads every weight once per token).
#pragma once
#include <cstddef>

namespace bonsai::cpu {

// Read bandwidth in GB/s (1e9 bytes/s): all OpenMP threads (omp_get_max_threads) sum a buffer of
// `bytes` (far larger than the caches), each its own contiguous part; the best of `runs` passes.
double measure_read_bandwidth_gbs(size_t bytes = size_t(256) << 20, int runs = 5);

}  // namespace bonsai::cpu
