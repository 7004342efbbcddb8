// GGUF's byte encoding (spec §3), shared by every format that stores GGUF-typed metadata
// (GGUF itself, `.bonsai`): little-endian scalars, strings as u64 length + bytes, typed
// key/value pairs. Writers append to a byte vector; KvReader reads a bounded section of a
// memory map and never reads past it or allocates for a count before the bytes are there.
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

void put_u32(std::vector<uint8_t>& out, uint32_t v);
void put_u64(std::vector<uint8_t>& out, uint64_t v);
void put_string(std::vector<uint8_t>& out, std::string_view s);

// One pair: string key, u32 type, value. Throws Error("metadata key '<key>': ...") (no path:
// the caller adds it) when the value does not hold its declared type or an array nests.
void write_kv(std::vector<uint8_t>& out, const std::string& key, const KvValue& v);
// Every pair of `meta`, in order.
void write_metadata(std::vector<uint8_t>& out, const Metadata& meta);

class KvReader {
 public:
  // Reads [data, data + size), the `section` ("metadata", "tensor table") of `path` that starts
  // at absolute file offset `base`; errors name the path, the section and the offset.
  KvReader(std::string path, std::string section, const uint8_t* data, uint64_t size,
           uint64_t base);

  uint8_t u8(std::string_view what);
  uint32_t u32(std::string_view what);
  uint64_t u64(std::string_view what);
  std::string str(std::string_view what);
  // A pointer to the next n bytes (inside the section), then skips them.
  const uint8_t* bytes(uint64_t n, std::string_view what);

  KvValue value(KvType type, const std::string& key);
  std::pair<std::string, KvValue> kv();
  // n pairs; Error on a duplicate or empty key.
  Metadata metadata(uint64_t n);

  uint64_t pos() const { return pos_; }  // within the section
  uint64_t remaining() const { return size_ - pos_; }
  uint64_t file_offset() const { return base_ + pos_; }
  // Error("<path>: <section> at offset <file_offset>: <what>").
  [[noreturn]] void fail_here(const std::string& what) const;

 private:
  void need(uint64_t n, std::string_view what) const;
  KvScalar scalar(KvType type, const std::string& key);

  std::string path_, section_;
  const uint8_t* data_;
  uint64_t size_, base_, pos_ = 0;
};

}  // namespace bonsai
