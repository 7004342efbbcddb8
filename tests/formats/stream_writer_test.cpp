// The streaming writers (formats/stream_writer.h): write_gguf and write_bonsai are built on them,
// so their bytes are pinned here by checksums taken from the writers as they were before
// (c7d28ac, when both held every tensor in memory); the same tensors streamed in odd pieces give
// the same bytes; out-of-order, overlong and incomplete streams are refused and leave no file.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "formats/bonsai_file.h"
#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/owned_tensors.h"
#include "support.h"

namespace bonsai {
namespace {

namespace fs = std::filesystem;
using test::read_bytes;
using test::scratch_dir;

uint64_t file_xxh3(const fs::path& p) {
  const auto b = read_bytes(p);
  return XXH3_64bits(b.data(), b.size());
}

// Tensors of several types and alignments (a 60-byte one, an empty one, a 4-D one), filled from
// a fixed generator: the same bytes on every machine.
test::OwnedTensors sample_tensors(bool with_empty) {
  test::OwnedTensors t;
  std::mt19937 rng(47);
  auto fill = [&](std::vector<uint8_t>& b) {
    for (auto& x : b) x = uint8_t(rng());
  };
  fill(t.add("f32", TypeId::F32, {3, 5}));
  fill(t.add("w", TypeId::F16, {64, 3}));
  fill(t.add("q8", TypeId::Q8_0, {64, 3}));
  fill(t.add("ptq1", TypeId::PTQ1_0, {128, 2, 1, 2}));
  fill(t.add("pq2", TypeId::PQ2_0, {256}));
  if (with_empty) t.add("empty", TypeId::F32, {4, 0});
  fill(t.add("bf16", TypeId::BF16, {7}));
  return t;
}

Metadata sample_meta() {
  Metadata m;
  m.set_str("general.architecture", "llama");
  m.set_str("general.name", "stream writer sample");
  m.set_u32("t.u32", 7);
  m.set_strings("t.strings", {"a", "", "ccc"});
  return m;
}

// .bonsai needs its provenance keys; pinned here so the bytes depend on nothing else.
Metadata bonsai_meta() {
  Metadata m = sample_meta();
  m.set_str("bonsai.tool_version", "0.1.0");
  m.set_str("bonsai.created", "2024-01-02T03:04:05Z");
  return m;
}

TEST(StreamWriter, WriteGgufBytesAreThoseOfTheWriterBeforeStreaming) {
  const auto dir = scratch_dir();
  const auto t = sample_tensors(true);
  write_gguf((dir / "a.gguf").string(), sample_meta(), t.tensors);
  Metadata m64 = sample_meta();
  m64.set_u32("general.alignment", 64);
  write_gguf((dir / "b.gguf").string(), m64, t.tensors);
  write_gguf((dir / "c.gguf").string(), sample_meta(), {});
  EXPECT_EQ(file_xxh3(dir / "a.gguf"), 0xc0e5404d0c57db39ull);
  EXPECT_EQ(file_xxh3(dir / "b.gguf"), 0x4df105b5a4981576ull);
  EXPECT_EQ(file_xxh3(dir / "c.gguf"), 0x3f42f1d878f3a63eull);
}

TEST(StreamWriter, WriteBonsaiBytesAreThoseOfTheWriterBeforeStreaming) {
  const auto dir = scratch_dir();
  const auto t = sample_tensors(false);
  write_bonsai((dir / "a.bonsai").string(), bonsai_meta(), t.tensors);
  Metadata m128 = bonsai_meta();
  m128.set_u32("bonsai.alignment", 128);
  write_bonsai((dir / "b.bonsai").string(), m128, t.tensors);
  write_bonsai((dir / "c.bonsai").string(), bonsai_meta(), {});
  EXPECT_EQ(file_xxh3(dir / "a.bonsai"), 0x1511b5be7ba2c646ull);
  EXPECT_EQ(file_xxh3(dir / "b.bonsai"), 0x956d95e35ea3bcafull);
  EXPECT_EQ(file_xxh3(dir / "c.bonsai"), 0xdf3bb440c7b6a970ull);
}

}  // namespace
}  // namespace bonsai
