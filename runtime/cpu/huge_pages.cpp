#include "runtime/cpu/huge_pages.h"

#include <sys/mman.h>

#include <new>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
// AddressSanitizer does not watch mmap'd memory: the arena poisons its mappings and unpoisons
// exactly the bytes it hands out, so a kernel reading past a weight copy is still reported.
#define BONSAI_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define BONSAI_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define BONSAI_POISON(p, n) ((void)(p), (void)(n))
#define BONSAI_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace bonsai::cpu {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;
// Bytes mapped at a time for the ranges that share mappings; a larger range gets its own.
constexpr size_t kShared = size_t(64) << 20;

constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

HugePageArena::Mapping HugePageArena::map(size_t bytes) {
  bytes = round_up(bytes, kHugePage);
  // Over-map by one huge page and trim both ends, so the mapping starts on a 2 MB boundary.
  void* raw = ::mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  auto* const start = static_cast<uint8_t*>(raw);
  auto* const base = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(start), kHugePage));
  if (base > start) ::munmap(start, size_t(base - start));
  if (const size_t tail = size_t(start + kHugePage - base); tail > 0) ::munmap(base + bytes, tail);
#ifdef MADV_HUGEPAGE
  // Advice only: where the kernel has no huge page to give, the range stays in 4 KB pages.
  ::madvise(base, bytes, MADV_HUGEPAGE);
#endif
  BONSAI_POISON(base, bytes);
  return {base, bytes};
}

HugePageArena::~HugePageArena() {
  for (const Mapping& m : mappings_) {
    BONSAI_UNPOISON(m.base, m.bytes);  // the address range may be mapped again by anyone
    ::munmap(m.base, m.bytes);
  }
}

uint8_t* HugePageArena::allocate(size_t bytes) {
  // A size no machine maps (a negative count cast to size_t, say) would wrap in the rounding below.
  if (bytes > (size_t(1) << 56)) throw std::bad_alloc();
  const size_t span = round_up(bytes == 0 ? 1 : bytes, 64);
  uint8_t* p;
  if (span > kShared / 4) {  // its own mapping: the shared one's free part stays for the next
    mappings_.reserve(mappings_.size() + 1);
    mappings_.push_back(map(span));
    p = static_cast<uint8_t*>(mappings_.back().base);
  } else {
    if (span > left_) {
      mappings_.reserve(mappings_.size() + 1);
      mappings_.push_back(map(kShared));
      next_ = static_cast<uint8_t*>(mappings_.back().base);
      left_ = mappings_.back().bytes;
    }
    p = next_;
    next_ += span;
    left_ -= span;
  }
  BONSAI_UNPOISON(p, bytes);
  return p;
}

}  // namespace bonsai::cpu
