// When the CPU kernels fork OpenMP threads, and how they share a matmul's rows.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

namespace bonsai::cpu {

// Multiply-adds below which a fork of threads costs more than it saves; below it the kernels do
// not open a parallel region at all (even a one-thread region costs about a microsecond).
constexpr int64_t kParallelWork = int64_t(1) << 16;

// fn(i) for i in [0, n): split statically across the threads when `parallel`, else a plain loop on
// this thread. An OpenMP region whose if clause is false still sets up a team of one: a one-row
// rmsnorm of 2048 floats took 2.9 us a call with it and 0.9 without on the 2-core Zen 5, and a
// generated token of Qwen3-1.7B makes 113 rmsnorms, 56 ropes and 28 SwiGLUs (docs/benchmarks.md,
// "Where a generated token's time goes").
template <class Fn>
void parallel_for(int64_t n, bool parallel, const Fn& fn) {
  if (parallel) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

// From this many tokens on, a step's products run as GEMMs: OpenBLAS SGEMMs for float weights
// (matmul.cpp) and attention (attention.cpp), codes unpacked once per tile of rows for quantized
// weights (kernels_avx2.cpp, gemm_q8); below it the per-token kernels are faster.
constexpr int64_t kGemmTokens = 16;

// Tiles 0..n-1 for the threads of one parallel region, by range stealing. Each thread owns a
// contiguous share and takes its tiles front to back, so its weights stream as one long run that
// the prefetchers stay ahead of. A thread whose share runs out takes the back half of the share
// with the most tiles left (a single tile when only one is left) and goes on with that. So the
// region still ends within about a tile of balanced when the host slows one core, which a share
// fixed in advance (a static schedule) does not, and a thread that never arrives (a region given
// fewer threads) only leaves its share to the others.
class TileShares {
 public:
  // The calling thread's instance, for the regions it forks (reused: no allocation per call).
  static TileShares& of_this_thread();
  // Shares for `threads` threads, set for each call of for_rows by the thread that forks them.
  void reset(int64_t tiles, int threads);
  // The next tile for thread `id` (< threads), or -1 when no share has any left.
  int64_t next(int id);

 private:
  struct alignas(64) Share {
    std::atomic<uint64_t> span;  // tiles [front, back): front | back << 32
  };
  bool steal(int id);
  std::unique_ptr<Share[]> shares_;
  int capacity_ = 0, threads_ = 0;
};

}  // namespace bonsai::cpu
