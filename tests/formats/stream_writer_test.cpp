// The streaming writers (formats/stream_writer.h): write_gguf and write_bonsai are built on them,
// so their bytes are pinned here by checksums taken from the writers as they were before
// (c7d28ac, when both held every tensor in memory); the same tensors streamed in odd pieces give
// the same bytes; out-of-order, overlong and incomplete streams are refused and leave no file; the
// free-space check a streaming writer makes before it starts.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
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

std::vector<std::string> folder(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// Streams `tensors` in pieces of 1, 2, 3, ... 7 bytes, then every other one by rows, 2 rows a
// chunk (a chunk limit below one row still makes progress: one row).
void stream_in_pieces(StreamWriter& w, const std::vector<Tensor>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    // A tensor of no bytes is complete from the start: the next bytes belong to the one after.
    if (t.nbytes > 0) {
      EXPECT_EQ(w.current(), i) << t.name;
    }
    if (i % 2 == 1) {
      const uint64_t rb = t.rows() > 0 ? t.nbytes / uint64_t(t.rows()) : 0;
      w.write_rows(
          i, [&](int64_t first, int64_t n, uint8_t* out) { std::memcpy(out, t.data + uint64_t(first) * rb, uint64_t(n) * rb); },
          i == 3 ? 1 : 2 * rb);
      continue;
    }
    uint64_t done = 0, piece = 1;
    while (done < t.nbytes) {
      const uint64_t n = std::min(piece, t.nbytes - done);
      w.write(t.data + done, n);
      done += n;
      piece = piece % 7 + 1;
    }
  }
  EXPECT_EQ(w.current(), tensors.size());
}

TEST(StreamWriter, PiecesAndRowsGiveTheWholeTensorWritersBytes) {
  const auto dir = scratch_dir();
  const auto t = sample_tensors(true);
  Metadata m64 = sample_meta();
  m64.set_u32("general.alignment", 64);
  write_gguf((dir / "whole.gguf").string(), m64, t.tensors);
  {
    GgufWriter w((dir / "streamed.gguf").string(), m64, t.tensors);
    stream_in_pieces(w, t.tensors);
    w.commit();
    EXPECT_EQ(w.file_bytes(), fs::file_size(dir / "streamed.gguf"));
  }
  EXPECT_EQ(read_bytes(dir / "streamed.gguf"), read_bytes(dir / "whole.gguf"));

  const auto b = sample_tensors(false);
  write_bonsai((dir / "whole.bonsai").string(), bonsai_meta(), b.tensors);
  {
    BonsaiWriter w((dir / "streamed.bonsai").string(), bonsai_meta(), b.tensors);
    stream_in_pieces(w, b.tensors);
    w.commit();
    EXPECT_EQ(w.file_bytes(), fs::file_size(dir / "streamed.bonsai"));
  }
  EXPECT_EQ(read_bytes(dir / "streamed.bonsai"), read_bytes(dir / "whole.bonsai"));
  // The checksums computed as the bytes streamed past are the ones the reader verifies.
  EXPECT_EQ(read_bonsai((dir / "streamed.bonsai").string()).tensors.size(), b.tensors.size());
}

// A stream that does not match its table is refused with an Error naming the output and the
// tensor, and leaves no output and no temporary.
TEST(StreamWriter, StreamsThatDoNotMatchTheTableLeaveNothing) {
  const auto dir = scratch_dir();
  const auto out = (dir / "out.gguf").string();
  const auto t = sample_tensors(true);
  auto refused = [&](const std::function<void(StreamWriter&)>& f, const std::string& part) {
    for (int format = 0; format < 2; ++format) {
      const std::string path = format == 0 ? out : (dir / "out.bonsai").string();
      const auto b = sample_tensors(false);
      const std::vector<Tensor>& table = format == 0 ? t.tensors : b.tensors;
      const std::string msg = test::error_of([&] {
        std::unique_ptr<StreamWriter> w;
        if (format == 0) w = std::make_unique<GgufWriter>(path, sample_meta(), table);
        else w = std::make_unique<BonsaiWriter>(path, bonsai_meta(), table);
        EXPECT_TRUE(folder(dir).empty()) << "the constructor created a file";
        f(*w);
      });
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
      EXPECT_TRUE(folder(dir).empty()) << path << ": " << part;
    }
  };
  // The first tensor is f32 [3, 5]: 60 bytes.
  refused([&](StreamWriter& w) { w.write(t.tensors[0].data, 61); }, "tensor 'f32' is given 61 bytes, its table entry holds 60");
  refused([&](StreamWriter& w) {
    w.write(t.tensors[0].data, 59);
    w.commit();
  }, "tensor 'f32' is incomplete (59 of its 60 bytes written)");
  refused([&](StreamWriter& w) { w.commit(); }, "tensor 'f32' is incomplete (0 of its 60");
  refused([&](StreamWriter& w) { w.write_rows(1, [](int64_t, int64_t, uint8_t*) {}, 1); },
          "tensor 'w' is written out of order: the next bytes belong to 'f32'");
  refused([&](StreamWriter& w) {
    w.write(t.tensors[0].data, 30);
    w.write_rows(0, [](int64_t, int64_t, uint8_t*) {}, 1);
  }, "'f32', 30 bytes into it");
  // Abandoned half way (an exception in the producer): the temporary goes with the writer.
  refused([&](StreamWriter& w) {
    w.write(t.tensors[0].data, 60);
    throw Error(w.path() + ": the producer gave up");
  }, "the producer gave up");
}

TEST(StreamWriter, TheLayoutIsKnownBeforeAnyByte) {
  const auto dir = scratch_dir();
  const auto t = sample_tensors(true);
  GgufWriter w((dir / "x.gguf").string(), sample_meta(), t.tensors);
  EXPECT_TRUE(folder(dir).empty());
  const uint64_t planned = w.file_bytes();
  EXPECT_GT(w.head_bytes(), 0u);
  write_tensors(w, t.tensors);
  EXPECT_EQ(fs::file_size(dir / "x.gguf"), planned);
}

// The free space a writer checks before it starts (formats/atomic_file.h): the filesystem's own
// figure for the output's folder, and a refusal that names the output and both sizes.
TEST(StreamWriter, FreeSpaceIsTheFilesystemsAndTooLittleIsRefused) {
  const auto dir = scratch_dir();
  const std::string out = (dir / "big.gguf").string();
  const uint64_t got = available_bytes(out);
  const uint64_t fs_says = fs::space(dir).available;
  // Other processes write to the same disk between the two calls.
  EXPECT_LT(got > fs_says ? got - fs_says : fs_says - got, uint64_t(1) << 30) << got << " vs " << fs_says;
  EXPECT_NO_THROW(require_space(out, 1000, 1000));
  const std::string msg = test::error_of([&] { require_space(out, uint64_t(3) << 30, uint64_t(1) << 30); });
  for (const std::string& part : std::vector<std::string>{out, "needs 3221225472 bytes (3.00 GiB)", "has 1073741824 bytes (1.00 GiB) free"})
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  const std::string missing = (dir / "no" / "such" / "x.gguf").string();
  EXPECT_NE(test::error_of([&] { available_bytes(missing); }).find(missing), std::string::npos);
}

}  // namespace
}  // namespace bonsai
