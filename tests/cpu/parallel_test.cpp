// team::run, the runtime's threads: every thread runs each region once, an exception on any
// reaches the caller, a nested region runs on its caller. TileShares, the range stealing that hands a matmul's row tiles to the threads: every tile goes
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

// team::run: the runtime's own threads (parallel.h).
namespace {

// Sets the thread count for a test and puts the old one back after it.
struct Threads {
  explicit Threads(int n) : saved(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(saved); }
  int saved;
};

}  // namespace

TEST(CpuTeam, EveryThreadRunsEachRegionOnceWhateverTheCountBefore) {
  for (const int n : {3, 1, 5, 2, 4}) {
    const Threads threads(n);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> wrong_count{0};
    constexpr int kRegions = 500;
    for (int r = 0; r < kRegions; ++r)
      team::run([&](int t, int nt) {
        if (nt != n || t < 0 || t >= n) ++wrong_count;
        else ++hits[size_t(t)];
      });
    EXPECT_EQ(wrong_count.load(), 0) << n << " threads";
    for (int t = 0; t < n; ++t) EXPECT_EQ(hits[size_t(t)].load(), kRegions) << "thread " << t << " of " << n;
  }
}

TEST(CpuTeam, WorkersThatFellAsleepWakeForTheNextRegion) {
  const Threads threads(2);
  for (int r = 0; r < 5; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // far past the workers' spinning
    std::atomic<int> ran{0};
    team::run([&](int t, int) { ran |= 1 << t; });
    EXPECT_EQ(ran.load(), 3) << "region " << r;
  }
}

TEST(CpuTeam, AnExceptionOnAnyThreadReachesTheCallerAndTheTeamGoesOn) {
  const Threads threads(3);
  for (const int thrower : {0, 1, 2}) {
    std::atomic<int> ran{0};
    EXPECT_THROW(team::run([&](int t, int) {
                   ++ran;
                   if (t == thrower) throw std::runtime_error("thread " + std::to_string(t));
                 }),
                 std::runtime_error);
    EXPECT_EQ(ran.load(), 3) << "the other threads still finish their part";
    std::atomic<int> after{0};
    team::run([&](int, int) { ++after; });
    EXPECT_EQ(after.load(), 3);
  }
}

TEST(CpuTeam, ARegionStartedInsideARegionRunsOnItsCallerAlone) {
  const Threads threads(2);
  std::atomic<int> inner_regions{0}, inner_wrong{0};
  team::run([&](int, int) {
    team::run([&](int t, int nt) {
      ++inner_regions;
      if (t != 0 || nt != 1) ++inner_wrong;
    });
  });
  EXPECT_EQ(inner_regions.load(), 2);
  EXPECT_EQ(inner_wrong.load(), 0);
#pragma omp parallel num_threads(2)
  team::run([&](int t, int nt) {
    if (t != 0 || nt != 1) ++inner_wrong;
  });
  EXPECT_EQ(inner_wrong.load(), 0) << "inside an OpenMP region";
}

// OpenBLAS's OpenMP build runs a call on omp_get_max_threads() threads of its caller: one on
// every thread of a region keeps a region's SGEMMs from forking teams of their own.
TEST(CpuTeam, ThreadsOfARegionSeeOneOpenMpThreadAndTheCallerGetsItsCountBack) {
  const Threads threads(2);
  std::atomic<int> seen_more{0};
  team::run([&](int, int) {
    if (omp_get_max_threads() != 1) ++seen_more;
  });
  EXPECT_EQ(seen_more.load(), 0);
  EXPECT_EQ(omp_get_max_threads(), 2);
}

TEST(CpuTeam, ParallelForAndParallelDynamicVisitEveryIndexOnce) {
  const Threads threads(3);
  for (const int64_t n : {0, 1, 2, 3, 1000}) {
    std::vector<std::atomic<int>> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    parallel_for(n, true, [&](int64_t i) { ++a[size_t(i)]; });
    parallel_dynamic(n, true, [&](int64_t i) { ++b[size_t(i)]; });
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[size_t(i)].load(), 1) << i << " of " << n;
      ASSERT_EQ(b[size_t(i)].load(), 1) << i << " of " << n;
    }
  }
}
