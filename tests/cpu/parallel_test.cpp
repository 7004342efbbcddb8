// TileShares, the range stealing that hands a matmul's row tiles to the threads: every tile goes
// to exactly one thread whatever the team, a thread that never arrives leaves its share to the
// others, and a slow thread's share is taken over by a fast one.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/cpu/parallel.h"

using namespace bonsai::cpu;

namespace {

// Runs a region of `team` threads over shares set for `shares` threads; returns how many times
// each tile was handed out, and (in *by_thread) how many tiles each thread took.
std::vector<int> hand_out(int64_t tiles, int shares, int team, std::vector<int64_t>* by_thread = nullptr,
                          std::chrono::microseconds thread0_per_tile = {}) {
  TileShares ts;
  ts.reset(tiles, shares);
  std::vector<std::atomic<int>> seen(static_cast<size_t>(tiles));
  std::vector<int64_t> took(size_t(team), 0);
#pragma omp parallel num_threads(team)
  {
    const int id = omp_get_thread_num();
    for (int64_t i; (i = ts.next(id)) >= 0;) {
      seen[size_t(i)].fetch_add(1);
      ++took[size_t(id)];
      if (id == 0 && thread0_per_tile.count() > 0) std::this_thread::sleep_for(thread0_per_tile);
    }
  }
  if (by_thread) *by_thread = took;
  std::vector<int> counts;
  for (const auto& s : seen) counts.push_back(s.load());
  return counts;
}

}  // namespace

TEST(CpuTileShares, EveryTileGoesToExactlyOneThread) {
  for (const int64_t tiles : {0, 1, 2, 7, 1000, 100003})
    for (const int threads : {1, 2, 3, 8}) {
      const std::vector<int> counts = hand_out(tiles, threads, threads);
      for (int64_t i = 0; i < tiles; ++i) ASSERT_EQ(counts[size_t(i)], 1) << "tile " << i << " of " << tiles << ", " << threads << " threads";
    }
}

TEST(CpuTileShares, SharesOfThreadsThatNeverArriveAreTakenByTheOthers) {
  const std::vector<int> counts = hand_out(5000, 6, 2);
  for (size_t i = 0; i < counts.size(); ++i) ASSERT_EQ(counts[i], 1) << "tile " << i;
}

TEST(CpuTileShares, AFastThreadTakesOverASlowOnesShare) {
  std::vector<int64_t> took;
  const std::vector<int> counts = hand_out(400, 2, 2, &took, std::chrono::microseconds(200));
  for (size_t i = 0; i < counts.size(); ++i) ASSERT_EQ(counts[i], 1) << "tile " << i;
  // Thread 0 sleeps at every tile; thread 1 finishes its 200 at once and then takes halves of
  // what thread 0 has left, so thread 0 ends with a small part of its 200.
  EXPECT_GT(took[1], 300) << "thread 0 took " << took[0];
}

TEST(CpuTileShares, RefusesCountsItCannotHold) {
  TileShares ts;
  EXPECT_THROW(ts.reset(-1, 2), std::invalid_argument);
  EXPECT_THROW(ts.reset(int64_t(1) << 32, 2), std::invalid_argument);
  EXPECT_THROW(ts.reset(10, 0), std::invalid_argument);
}
