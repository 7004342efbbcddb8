// Memory for the bytes the kernels stream once per token (the weight copies, the CPU backend's
// KV cache and activations) and for the bandwidth probe that judges them, in transparent huge
// pages. Debian's kernels give an anonymous mapping huge pages only where it asks (THP
// "madvise"). On the 2-core VM a decode step's products (bench_matmul's model sweep) streamed ~2%
// faster from 2 MB pages than from 4 KB ones, and generation was 2-8% faster, inside that
// machine's noise (docs/benchmarks.md, "Weight copies and buffers in huge pages"). The probe reads
// its buffer from the same kind of pages, so the roofline is measured on memory laid out as the
// weights are.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace bonsai::cpu {

// Hands out zeroed, 64-byte aligned byte ranges that live as long as the arena, carved in order
// from 2 MB-aligned anonymous mappings asked for huge pages (madvise MADV_HUGEPAGE). One weight
// of Qwen3-1.7B's attention is under 1 MB, so giving each its own mapping would leave it in 4 KB
// pages; carved one after another they share 2 MB pages, in the order the first token reads them.
// Pages are faulted in on first touch, so a mapping's unused tail costs address space, not memory.
class HugePageArena {
 public:
  HugePageArena() = default;
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;
  ~HugePageArena();

  // `bytes` zero bytes at a 64-byte boundary. Throws std::bad_alloc when the system maps no more
  // (or `bytes` is beyond any machine's memory).
  uint8_t* allocate(size_t bytes);

 private:
  struct Mapping {
    void* base;
    size_t bytes;
  };
  static Mapping map(size_t bytes);
  std::vector<Mapping> mappings_;
  uint8_t* next_ = nullptr;  // the free part of the newest shared mapping
  size_t left_ = 0;
};

}  // namespace bonsai::cpu
