// The runtime's threads (team::run) and how they share a matmul's rows (TileShares).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

namespace bonsai::cpu {

// Multiply-adds below which a parallel region costs more than it saves; below it the kernels
// run on the calling thread alone.
constexpr int64_t kParallelWork = int64_t(1) << 16;

// The runtime's threads: the caller and omp_get_max_threads() - 1 workers of its own, which spin
// between regions (and sleep once idle for 200 us): each of a decode step's ~140 regions (113
// products, 28 attentions for Qwen3-1.7B) costs 0.8-1.0 us less than an OpenMP region on the
// 2-core Zen 5, and PTQ1_0's generation ran 4% faster (docs/benchmarks.md, "The runtime's own
// threads"). Every parallel step of a forward pass runs here, the OpenBLAS calls of prompts
// included: with libgomp's spinning threads and these both active, the two sets fought for the
// cores. OpenMP stays in the quantization pipeline (calibrate/, quantize/).
namespace team {

// The threads a region started now on this thread would get.
int size();

// Thread `thread`'s part [begin, end) of n items cut into `threads` contiguous parts, the same for
// every region of as many threads (so the part a thread first touched is the part it reads).
struct Part {
  int64_t begin, end;
};
constexpr Part part(int64_t n, int thread, int threads) { return {n * thread / threads, n * (thread + 1) / threads}; }

// fn(ctx, thread, threads) on each thread of a region, thread 0 being the caller; returns when
// all are done, rethrowing the first exception any of them threw. A region started while the
// team is busy (from a worker, another thread, or inside an OpenMP region) runs fn(ctx, 0, 1) on
// the caller alone.
void run(void (*fn)(void* ctx, int thread, int threads), void* ctx);

// fn(thread, threads) as above. (A template over a plain function pointer: kernels_avx2.cpp may
// not instantiate std:: templates.)
template <class Fn>
void run(const Fn& fn) {
  run([](void* f, int thread, int threads) { (*static_cast<const Fn*>(f))(thread, threads); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace team

// fn(i) for i in [0, n): split into one contiguous range per thread of the team when `parallel`,
// else a plain loop on this thread.
template <class Fn>
void parallel_for(int64_t n, bool parallel, const Fn& fn) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  team::run([&](int thread, int threads) {
    for (auto [i, end] = team::part(n, thread, threads); i < end; ++i) fn(i);
  });
}

// fn(i) for i in [0, n), each i taken by the next thread of the team that is free: for items of
// uneven cost (attention heads over different spans, tiles of codes). A builtin atomic, not
// std::atomic, for kernels_avx2.cpp's sake.
template <class Fn>
void parallel_dynamic(int64_t n, bool parallel, const Fn& fn) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  int64_t next = 0;
  team::run([&](int, int) {
    for (int64_t i; (i = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED)) < n;) fn(i);
  });
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
