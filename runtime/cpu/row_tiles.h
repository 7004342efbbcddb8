// How the int8 and float kernels (kernels_avx2.cpp, kernels_avx512.cpp) hand matmul rows to the
// threads. Header-only templates on purpose: each kernel file instantiates them with its own
// lambdas (types local to that file), so every copy is compiled for its file's instruction set
// and none can stand in for another at link time.
#pragma once
#include <cstdint>

#include "runtime/cpu/parallel.h"

namespace bonsai::cpu::tiles {

// Weight bytes of the row tile kept in L2 while it meets every group of tokens (n_tokens > 1).
constexpr int64_t kTileBytes = int64_t(128) << 10;
// Tokens sharing one pass over a weight row: their activations sit in L1 meanwhile.
constexpr int kTokens = 4;
// How far ahead a lone token's rows ask for their weights (software prefetch, in both kernel
// files): it must cover the memory's latency at the rate one core eats weights (kernels_avx512.cpp
// and kernels_avx2.cpp say what it gained on each machine). Past a run's last row the prefetches
// read a few KB in vain, and cannot fault.
constexpr int64_t kPrefetchBytes = 4096;
// The same for the kernels that prefetch into L2 only (PTQ1_0's AVX-512 lookups, the float rows):
// twice as far, since a line asked for into L2 has a trip to L1 still to make.
constexpr int64_t kL2PrefetchBytes = 2 * kPrefetchBytes;

constexpr int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The rows are cut into tiles of contiguous weights, which the threads take by range stealing
// (TileShares): each streams its own contiguous share, so the first runs are as long as a static
// split's, and one that runs out takes the back half of what another has left, so a thread that
// finishes early takes over the rest instead of waiting at the end of the matmul (8-11% of a
// decode step's samples with the static split on the 2-core machine, where a shared host slows the
// two cores unevenly; one tile at a time from the start, a dynamic schedule, cost 13-23% of tg: the
// hardware prefetcher restarts at every short tile; libgomp's guided schedule gives the first
// thread half of the tiles at once, so it balanced only the second half). With several tokens a
// tile is ~kTileBytes of weights, and it meets the tokens kTokens at a time, so weights come from
// memory once and every unpacked block serves kTokens tokens; with one token the tiles are 8 times
// smaller. fn(row, row count <= Step, first token, count <= kTokens) does the dots of Step rows at
// a time (fewer at the end of a tile).
// `tile` sets the weight bytes of a tile for several tokens (PTQ1_0's lookups take larger tiles:
// each tile reads every token's tables again).
template <int Step, class Fn>
void for_rows(int64_t rows, int64_t n_tokens, int64_t row_bytes, int64_t cols, const Fn& fn,
              int64_t tile = kTileBytes) {
  const int64_t tile_bytes = n_tokens > kTokens ? tile : kTileBytes / 8;
  const int64_t fit = tile_bytes / row_bytes / Step * Step;  // whole Step-row groups in tile_bytes
  const int64_t tile_rows = fit > Step ? fit : Step;
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  auto run = [&](int64_t i) {
    const int64_t rt = i * tile_rows, re = min64(rows, rt + tile_rows);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokens)
      for (int64_t r = rt; r < re; r += Step) fn(r, int(min64(Step, re - r)), t0, int(min64(kTokens, n_tokens - t0)));
  };
  if (rows * cols * n_tokens >= kParallelWork) {
    TileShares& shares = TileShares::of_this_thread();
    shares.reset(tiles, team::size());
    team::run([&](int thread, int) {
      for (int64_t i; (i = shares.next(thread)) >= 0;) run(i);
    });
  } else {
    for (int64_t i = 0; i < tiles; ++i) run(i);
  }
}

}  // namespace bonsai::cpu::tiles
