// The fixed part of the .bonsai layout (docs/formats/bonsai.md), read here from the spec rather
// than through the reader, so tests and the fuzz target can change single fields and recompute
// the header checksum that would otherwise refuse every change.
#pragma once
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace bonsai::test::bonsai_layout {

using Bytes = std::vector<uint8_t>;

constexpr size_t kHeaderBytes = 96;
constexpr size_t kChecksumAt = 88;

inline uint32_t rd32(const Bytes& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
inline uint64_t rd64(const Bytes& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
inline void wr32(Bytes& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
inline void wr64(Bytes& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

// End of the checksummed region: header, metadata section, tensor table (no overflow check: callers
// pass their own files, or check it against the size first as fix_checksum does).
inline uint64_t region_end(const Bytes& b) { return kHeaderBytes + rd64(b, 40) + rd64(b, 64); }

// Spec §6: XXH3-64 over [0, 88) ++ [96, region end), stored at 88.
inline void rechecksum(Bytes& b) {
  Bytes covered(b.begin(), b.begin() + kChecksumAt);
  covered.insert(covered.end(), b.begin() + kHeaderBytes, b.begin() + ptrdiff_t(region_end(b)));
  wr64(b, kChecksumAt, XXH3_64bits(covered.data(), covered.size()));
}

// rechecksum() when the header's section sizes keep the region inside the bytes; false (b
// unchanged) otherwise.
inline bool fix_checksum(Bytes& b) {
  if (b.size() < kHeaderBytes) return false;
  const uint64_t meta = rd64(b, 40), table = rd64(b, 64);
  if (meta > b.size() || table > b.size() || kHeaderBytes + meta + table > b.size()) return false;
  rechecksum(b);
  return true;
}

}  // namespace bonsai::test::bonsai_layout
