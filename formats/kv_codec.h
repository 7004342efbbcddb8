// GGUF's byte encoding (spec §3), shared by every format that stores GGUF-typed metadata
// (GGUF itself, `.bonsai`): little-endian scalars, strings as u64 length + bytes, typed
// key/value pairs. Writers append to a byte vector; KvReader reads a bounded span of a memory
// map and never reads past it or allocates for a count before the bytes are there. This is
// the one definition of that encoding: the GGUF and .bonsai readers and writers only add
// their own headers and tensor tables, read and written with the same pieces.
#pragma once
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/metadata.h"

namespace bonsai {

static_assert(std::endian::native == std::endian::little,
              "the on-disk formats are little-endian and are read by memcpy");

// The smallest encoded pair (a 1-byte key, a u32 type, a 1-byte value): what a count of pairs
// is bounded by before anything is read or reserved for it.
constexpr uint64_t kMinKvPairBytes = 8 + 1 + 4 + 1;

void put_u32(std::vector<uint8_t>& out, uint32_t v);
void put_u64(std::vector<uint8_t>& out, uint64_t v);
void put_string(std::vector<uint8_t>& out, std::string_view s);

// One pair: string key, u32 type, value. Throws Error("<path>: metadata key '<key>': ...") when
// the key is empty, the value does not hold its declared type or an array nests; `path` is the
// file the bytes are for.
void write_kv(std::vector<uint8_t>& out, const std::string& key, const KvValue& v,
              const std::string& path);
// Every pair of `meta`, in order.
void write_metadata(std::vector<uint8_t>& out, const Metadata& meta, const std::string& path);

class KvReader {
 public:
  // Reads [data, data + size), which starts at absolute file offset `base` of `path`. Errors
  // name the path, the `section` being read ("metadata", "tensor table") and the offset.
  // `bound` names what ends the span in truncation messages: the section itself by default;
  // "file" for GGUF, whose sections end only where the next one is found to begin.
  KvReader(std::string path, std::string section, const uint8_t* data, uint64_t size,
           uint64_t base, std::string bound = {});

  // From here on, errors name this section (GGUF's header, metadata and tensor infos follow
  // each other within one span).
  void enter(std::string section) { section_ = std::move(section); }

  uint8_t u8(std::string_view what);
  uint32_t u32(std::string_view what);
  uint64_t u64(std::string_view what);
  std::string str(std::string_view what);
  // A pointer to the next n bytes (inside the span), then skips them.
  const uint8_t* bytes(uint64_t n, std::string_view what);

  // Refuses, before anything is read or reserved for them, a count of items that take at least
  // `min_bytes` each and cannot fit in the bytes left. `what` names the count with its number,
  // in the singular ("array of 5 string"): "<what> does not fit in the N bytes left".
  void check_count(uint64_t n, uint64_t min_bytes, std::string_view what) const;

  KvValue value(KvType type, const std::string& key);
  // n pairs; Error on a duplicate or empty key.
  Metadata metadata(uint64_t n);

  uint64_t pos() const { return pos_; }  // within the span
  uint64_t remaining() const { return size_ - pos_; }
  uint64_t file_offset() const { return base_ + pos_; }
  // Error("<path>: <section> at offset <file_offset>: <what>").
  [[noreturn]] void fail_here(const std::string& what) const;

 private:
  void need(uint64_t n, std::string_view what) const;
  // `what` names the value in truncation messages.
  KvScalar scalar(KvType type, const std::string& key, const std::string& what);
  // Pair number `index` of the metadata being read.
  std::pair<std::string, KvValue> kv(uint64_t index);

  std::string path_, section_, bound_;
  const uint8_t* data_;
  uint64_t size_, base_, pos_ = 0;
};

}  // namespace bonsai
