#include "runtime/cpu/parallel.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace bonsai::cpu {
namespace {

// One spin of a thread waiting in a region of `threads` threads: a pause, which tells the core (and
// an SMT sibling) that nothing useful runs here; or, with more threads than cores, the core itself
// for the thread waited for, which may have no core to run on (spinning, CpuTeam's regions of 3 to 5
// threads took seconds on the 2-core machine instead of tens of milliseconds).
void relax(int threads) {
  static const int cores = omp_get_num_procs();
  if (threads > cores) return std::this_thread::yield();
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The team behind team::run. Each region is published as one word, its number << kThreadBits |
// its thread count, so a worker learns from a single load both that there is work and whether
// it is one of the region's threads (a worker past a smaller region's count sits it out). The
// job (fn_, ctx_) is written before the word and read after it; the caller rewrites it only after
// every worker of the region has counted itself done in left_, so no worker reads a half-written
// job.
class Team {
 public:
  void run(void (*fn)(void*, int, int), void* ctx);

 private:
  static constexpr int kThreadBits = 16;
  static constexpr int kMaxThreads = 1 << 12;
  // How long an idle worker spins before it sleeps: far longer than the gaps between a decode
  // step's regions (a few microseconds), short enough that an idle process leaves the cores.
  static constexpr std::chrono::microseconds kSpin{200};

  static int threads_of(uint64_t word) { return int(word & ((uint64_t(1) << kThreadBits) - 1)); }
  void work(int id, uint64_t seen);
  void keep(std::exception_ptr e);

  std::atomic<uint64_t> word_{0};
  std::atomic<int> left_{0};     // workers of the current region not yet done
  std::atomic<bool> asleep_[kMaxThreads] = {};  // by worker: waiting on wake_ (or about to)
  std::atomic<bool> busy_{false};
  void (*fn_)(void*, int, int) = nullptr;
  void* ctx_ = nullptr;
  int workers_ = 0;  // started so far, numbered 1..workers_; they never exit
  std::mutex mutex_;  // for wake_, and for error_ while a region runs
  std::condition_variable wake_;
  std::exception_ptr error_;
};

void Team::run(void (*fn)(void*, int, int), void* ctx) {
  int threads = std::min(omp_get_max_threads(), kMaxThreads);
  if (threads <= 1 || omp_in_parallel() || busy_.exchange(true, std::memory_order_acquire)) return fn(ctx, 0, 1);
  struct Idle {
    std::atomic<bool>& busy;
    ~Idle() { busy.store(false, std::memory_order_release); }
  } idle{busy_};
  while (workers_ < threads - 1) {
    try {
      // The word it starts from is read here, before the region it is started for is published.
      std::thread([this, id = workers_ + 1, seen = word_.load(std::memory_order_relaxed)] { work(id, seen); }).detach();
      ++workers_;
    } catch (const std::system_error&) {  // the OS has no more threads to give: run with fewer
      threads = workers_ + 1;
    }
  }
  fn_ = fn;
  ctx_ = ctx;
  error_ = nullptr;
  left_.store(threads - 1, std::memory_order_relaxed);
  const uint64_t region = (word_.load(std::memory_order_relaxed) >> kThreadBits) + 1;
  word_.store(region << kThreadBits | uint64_t(threads));  // seq_cst: ordered before the loads of asleep_
  for (int id = 1; id < threads; ++id)
    if (asleep_[id].load()) {
      std::lock_guard<std::mutex> lock(mutex_);  // a sleeper is either waiting on wake_ or will see the word
      wake_.notify_all();
      break;
    }
  const int icv = omp_get_max_threads();
  omp_set_num_threads(1);  // see work()
  try {
    fn(ctx, 0, threads);
  } catch (...) {
    keep(std::current_exception());
  }
  omp_set_num_threads(icv);
  while (left_.load(std::memory_order_acquire) > 0) relax(threads);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void Team::work(int id, uint64_t seen) {
  // OpenBLAS's OpenMP build runs a call on omp_get_max_threads() threads of the calling thread
  // (forking an OpenMP team from it): at one, each SGEMM in a region stays on its thread, as it does
  // inside an OpenMP region. The caller's count is one too while it works in a region.
  omp_set_num_threads(1);
  for (;;) {
    uint64_t word = word_.load(std::memory_order_acquire);
    for (auto since = std::chrono::steady_clock::now(); word == seen; word = word_.load(std::memory_order_acquire)) {
      // A worker left out of the last region (the thread count fell) sleeps at once: spinning, it
      // would take a core from the region's threads. Asleep, it costs the caller nothing: a
      // region notifies wake_ only when one of its own workers sleeps.
      if (id < threads_of(seen)) {
        for (int i = 0; i < 256 && word_.load(std::memory_order_relaxed) == seen; ++i) relax(threads_of(seen));
        if (std::chrono::steady_clock::now() - since < kSpin) continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      asleep_[id].store(true);  // seq_cst: ordered before the load of word_ in the wait below
      wake_.wait(lock, [&] { return word_.load() != seen; });
      asleep_[id].store(false);
      since = std::chrono::steady_clock::now();
    }
    seen = word;
    const int threads = threads_of(word);
    if (id >= threads) continue;
    try {
      fn_(ctx_, id, threads);
    } catch (...) {
      keep(std::current_exception());
    }
    left_.fetch_sub(1, std::memory_order_release);
  }
}

void Team::keep(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) error_ = std::move(e);
}

constexpr uint64_t span_of(uint64_t front, uint64_t back) { return front | back << 32; }
constexpr uint64_t front_of(uint64_t span) { return span & 0xffffffffu; }
constexpr uint64_t back_of(uint64_t span) { return span >> 32; }

}  // namespace

namespace team {

int size() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// Never destroyed: its workers outlive main. A fork's child (which has none of the workers) starts
// a team of its own.
Team*& the_team() {
  static Team* team = [] {
    pthread_atfork(nullptr, nullptr, [] { the_team() = new Team; });
    return new Team;
  }();
  return team;
}

void run(void (*fn)(void*, int, int), void* ctx) { the_team()->run(fn, ctx); }

}  // namespace team

TileShares& TileShares::of_this_thread() {
  thread_local TileShares shares;
  return shares;
}

void TileShares::reset(int64_t tiles, int threads) {
  if (tiles < 0 || tiles >= (int64_t(1) << 32) || threads < 1)
    throw std::invalid_argument("TileShares: " + std::to_string(tiles) + " tiles for " + std::to_string(threads) +
                                " threads");
  if (threads > capacity_) {
    shares_ = std::make_unique<Share[]>(size_t(threads));
    capacity_ = threads;
  }
  threads_ = threads;
  for (int i = 0; i < threads; ++i)
    shares_[i].span.store(span_of(uint64_t(tiles * i / threads), uint64_t(tiles * (i + 1) / threads)),
                          std::memory_order_relaxed);
}

int64_t TileShares::next(int id) {
  std::atomic<uint64_t>& own = shares_[id].span;
  for (;;) {
    uint64_t s = own.load(std::memory_order_relaxed);
    while (front_of(s) < back_of(s))
      if (own.compare_exchange_weak(s, s + 1, std::memory_order_relaxed)) return int64_t(front_of(s));
    if (!steal(id)) return -1;
  }
}

// Moves the back half of the fullest other share (at least its last tile) into thread id's empty
// share; false when every share is empty.
bool TileShares::steal(int id) {
  for (;;) {
    int victim = -1;
    uint64_t most = 0, s = 0;
    for (int i = 0; i < threads_; ++i) {
      const uint64_t v = shares_[i].span.load(std::memory_order_relaxed);
      const uint64_t left = front_of(v) < back_of(v) ? back_of(v) - front_of(v) : 0;
      if (i != id && left > most) victim = i, most = left, s = v;
    }
    if (victim < 0) return false;
    const uint64_t mid = front_of(s) + (back_of(s) - front_of(s)) / 2;
    if (shares_[victim].span.compare_exchange_strong(s, span_of(front_of(s), mid), std::memory_order_relaxed)) {
      shares_[id].span.store(span_of(mid, back_of(s)), std::memory_order_relaxed);
      return true;
    }
  }
}

}  // namespace bonsai::cpu
