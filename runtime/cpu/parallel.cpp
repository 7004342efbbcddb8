#include "runtime/cpu/parallel.h"

#include <stdexcept>
#include <string>

namespace bonsai::cpu {
namespace {

constexpr uint64_t span_of(uint64_t front, uint64_t back) { return front | back << 32; }
constexpr uint64_t front_of(uint64_t span) { return span & 0xffffffffu; }
constexpr uint64_t back_of(uint64_t span) { return span >> 32; }

}  // namespace

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
