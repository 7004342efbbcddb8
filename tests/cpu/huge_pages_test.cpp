// HugePageArena (runtime/cpu/huge_pages.h): the memory of the weight copies, the CPU backend's
// buffers and the bandwidth probe.
#include "runtime/cpu/huge_pages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace bonsai {
namespace {

// Ranges of the sizes a model's copies have (attention's under 1 MB, an MLP's few MB, an output
// matrix of hundreds: here 40 MB, past the shared mappings' limit) come back zeroed, 64-byte
// aligned, writable and apart from each other; the first starts a 2 MB page.
TEST(HugePageArena, RangesAreZeroAlignedAndDisjoint) {
  cpu::HugePageArena arena;
  std::vector<std::pair<uint8_t*, size_t>> got;
  for (size_t bytes : {size_t(458752), size_t(1), size_t(917504), size_t(2883584), size_t(40) << 20, size_t(100),
                       size_t(2883584), size_t(0)}) {
    uint8_t* p = arena.allocate(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    EXPECT_TRUE(std::all_of(p, p + bytes, [](uint8_t b) { return b == 0; })) << bytes;
    std::fill(p, p + bytes, uint8_t(0xA5));
    got.emplace_back(p, bytes);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got[0].first) % (uintptr_t(2) << 20), 0u);
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t j = i + 1; j < got.size(); ++j) {
      const auto [a, na] = got[i];
      const auto [b, nb] = got[j];
      EXPECT_TRUE(a + na <= b || b + nb <= a) << "ranges " << i << " and " << j << " overlap";
    }
  for (const auto& [p, bytes] : got)  // each still holds its own writes
    EXPECT_TRUE(std::all_of(p, p + bytes, [](uint8_t b) { return b == 0xA5; }));
}

// A size beyond any machine (what a negative count becomes as size_t) is std::bad_alloc, not a
// rounding that wraps to a small range.
TEST(HugePageArena, ImpossibleSizeIsBadAlloc) {
  cpu::HugePageArena arena;
  EXPECT_THROW(arena.allocate(size_t(-4)), std::bad_alloc);
  EXPECT_THROW(arena.allocate(size_t(1) << 62), std::bad_alloc);
}

}  // namespace
}  // namespace bonsai
