// The `.bonsai` container (docs/formats/bonsai.md): round trips, byte-identical rewrites,
// checksums that name the damaged tensor, and bad input of every kind refused with an Error
// naming the file. The file layout is re-parsed here from the spec (not through the reader) so
// the tests can corrupt single fields and recompute the header checksum, reaching the checks
// behind it.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "formats/bonsai_file.h"
#include "formats/error.h"
#include "formats/bonsai_layout.h"
#include "formats/owned_tensors.h"
#include "support.h"

namespace bonsai {
namespace {

namespace fs = std::filesystem;
using test::read_bytes;
using test::scratch_dir;
using test::write_bytes;

// ---- the layout, from the spec ----

using namespace test::bonsai_layout;

// Positions of one tensor table entry's fields (spec §5).
struct EntryAt {
  std::string name, base;
  size_t name_at, type_at, role_at, ne_at, offset_at, nbytes_at, checksum_at;
  uint32_t role;
  uint64_t offset, nbytes;
};

std::vector<EntryAt> parse_table(const Bytes& b) {
  std::vector<EntryAt> out;
  size_t at = size_t(rd64(b, 56));
  auto str = [&](size_t& p) {
    const size_t n = size_t(rd64(b, p));
    std::string s(reinterpret_cast<const char*>(b.data() + p + 8), n);
    p += 8 + n;
    return s;
  };
  for (uint64_t i = 0; i < rd64(b, 48); ++i) {
    EntryAt e;
    e.name_at = at;
    e.name = str(at);
    e.type_at = at;
    e.role_at = at + 4;
    e.role = rd32(b, at + 4);
    const uint32_t n_dims = rd32(b, at + 8);
    e.ne_at = at + 12;
    at += 12 + 8 * size_t(n_dims);
    e.offset_at = at;
    e.offset = rd64(b, at);
    e.nbytes_at = at + 8;
    e.nbytes = rd64(b, at + 8);
    e.checksum_at = at + 16;
    at += 24;
    e.base = str(at);
    out.push_back(e);
  }
  return out;
}

const EntryAt& entry(const std::vector<EntryAt>& es, const std::string& name) {
  auto it = std::find_if(es.begin(), es.end(), [&](const EntryAt& e) { return e.name == name; });
  if (it == es.end()) throw std::runtime_error("no entry " + name);
  return *it;
}

// ---- inputs ----

// One key of every GGUF value type, and an array of every element type (one empty).
Metadata every_kv_type() {
  Metadata m;
  m.set_str("general.architecture", "qwen3");
  m.set("t.u8", KvValue::of(uint8_t(200)));
  m.set("t.i8", KvValue::of(int8_t(-5)));
  m.set("t.u16", KvValue::of(uint16_t(60000)));
  m.set("t.i16", KvValue::of(int16_t(-30000)));
  m.set("t.u32", KvValue::of(uint32_t(4000000000u)));
  m.set("t.i32", KvValue::of(int32_t(-2000000000)));
  m.set("t.f32", KvValue::of(3.25f));
  m.set("t.bool", KvValue::of(true));
  m.set("t.string", KvValue::of(std::string("a\0b \xC3\xA9", 6)));
  m.set("t.u64", KvValue::of(uint64_t(1) << 60));
  m.set("t.i64", KvValue::of(-(int64_t(1) << 60)));
  m.set("t.f64", KvValue::of(-1e300));
  m.set("a.u8", KvValue::of_array(KvType::U8, {uint8_t(1), uint8_t(255)}));
  m.set("a.i8", KvValue::of_array(KvType::I8, {int8_t(-128), int8_t(127)}));
  m.set("a.u16", KvValue::of_array(KvType::U16, {uint16_t(7)}));
  m.set("a.i16", KvValue::of_array(KvType::I16, {int16_t(-7), int16_t(8)}));
  m.set("a.u32", KvValue::of_array(KvType::U32, {}));
  m.set_i32s("a.i32", {1, -2, 3});
  m.set_f32s("a.f32", {0.5f, -0.0f, 1e-30f});
  m.set("a.bool", KvValue::of_array(KvType::BOOL, {true, false, true}));
  m.set_strings("tokenizer.ggml.tokens", {"<s>", "", "\xE2\x96\x81the"});
  m.set("a.u64", KvValue::of_array(KvType::U64, {~uint64_t(0)}));
  m.set("a.i64", KvValue::of_array(KvType::I64, {int64_t(-1), int64_t(1) << 62}));
  m.set("a.f64", KvValue::of_array(KvType::F64, {3.0, -2.5e-300}));
  m.set_str("bonsai.plan", R"({"rules":[{"match":"blk.*.attn_*","type":"PTQ1_0"}]})");
  m.set_str("bonsai.provenance.source_sha256", std::string(64, 'a'));
  m.set_str("bonsai.provenance.calib_sha256", std::string(63, '0') + "f");
  return m;
}

// Tensors with owned, pseudo-random bytes (the container does not interpret them).
struct Model : test::OwnedTensors {
  Metadata meta = every_kv_type();
  std::mt19937 rng{1234};

  void add(const std::string& name, TypeId type, std::vector<int64_t> ne) {
    for (auto& x : OwnedTensors::add(name, type, std::move(ne))) x = uint8_t(rng());
  }
};

Model small_model() {
  Model m;
  m.add("token_embd.weight", TypeId::F32, {8, 3});
  m.add("blk.0.attn_q.weight", TypeId::PTQ1_0, {256, 2});
  m.add("blk.0.attn_k.weight", TypeId::PQ2_0, {128, 3});
  m.add("blk.0.ffn_up.weight", TypeId::Q8_0, {64, 2, 2});
  m.add("blk.0.attn_q.weight.rc_codebook", TypeId::F16, {4, 16});
  m.add("blk.0.attn_q.weight.rc_index", TypeId::F32, {4, 2});
  m.add("blk.0.attn_k.weight.group_params", TypeId::F32, {2, 1, 3});
  m.add("output_norm.weight", TypeId::BF16, {8});
  return m;
}

// Overwrites one byte in place. The corruption loops patch and shrink one file rather than
// rewrite it: replacing a file's contents by truncation costs milliseconds on ext4.
void poke(const fs::path& p, size_t at, uint8_t v) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(at));
  f.put(char(v));
  if (!f) throw std::runtime_error("cannot patch " + p.string());
}
// The same for a whole file of unchanged size.
void overwrite(const fs::path& p, const Bytes& b) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  if (!f) throw std::runtime_error("cannot patch " + p.string());
}

using test::error_of;

std::string read_error(const fs::path& p, bool verify = true) {
  return error_of([&] { read_bonsai(p.string(), {verify}); });
}

class BonsaiFile : public ::testing::Test {
 protected:
  void SetUp() override { ::setenv("SOURCE_DATE_EPOCH", "1700000000", 1); }
  void TearDown() override { ::unsetenv("SOURCE_DATE_EPOCH"); }

  // The small model written once; returns its bytes.
  Bytes written(const fs::path& p) {
    write_bonsai(p.string(), model.meta, model.tensors);
    return read_bytes(p);
  }

  Model model = small_model();
  fs::path dir = scratch_dir();
};

// ---- round trip ----

TEST_F(BonsaiFile, RoundTripKeepsEveryKeyAndTensor) {
  const fs::path p = dir / "m.bonsai";
  write_bonsai(p.string(), model.meta, model.tensors);
  const TensorSet ts = read_bonsai(p.string());
  EXPECT_EQ(ts.format, "bonsai");
  EXPECT_EQ(ts.path, p.string());

  // Every key comes back with its type and value, in order, followed by the two the writer adds.
  ASSERT_EQ(ts.meta.size(), model.meta.size() + 2);
  for (size_t i = 0; i < model.meta.size(); ++i) {
    EXPECT_EQ(ts.meta.items()[i].first, model.meta.items()[i].first);
    EXPECT_TRUE(ts.meta.items()[i].second == model.meta.items()[i].second)
        << model.meta.items()[i].first << ": " << kv_to_string(ts.meta.items()[i].second);
  }
  EXPECT_FALSE(ts.meta.get_str("bonsai.tool_version")->empty());
  EXPECT_EQ(*ts.meta.get_str("bonsai.created"), "2023-11-14T22:13:20Z");  // SOURCE_DATE_EPOCH

  ASSERT_EQ(ts.tensors.size(), model.tensors.size());
  for (size_t i = 0; i < model.tensors.size(); ++i) {
    const Tensor& w = model.tensors[i];
    const Tensor& r = ts.tensors[i];
    EXPECT_EQ(r.name, w.name);
    EXPECT_EQ(r.type, w.type);
    EXPECT_EQ(r.ne, w.ne);
    ASSERT_EQ(r.nbytes, w.nbytes);
    EXPECT_EQ(std::memcmp(r.data, w.data, w.nbytes), 0) << w.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data) % 64, 0u) << w.name << " is not 64-aligned";
  }
}

TEST_F(BonsaiFile, LinkedTensorsStoreRoleAndBase) {
  const Bytes b = written(dir / "m.bonsai");
  const auto es = parse_table(b);
  EXPECT_EQ(entry(es, "blk.0.attn_q.weight").role, 0u);
  EXPECT_EQ(entry(es, "blk.0.attn_q.weight").base, "");
  EXPECT_EQ(entry(es, "blk.0.attn_q.weight.rc_codebook").role, 1u);
  EXPECT_EQ(entry(es, "blk.0.attn_q.weight.rc_codebook").base, "blk.0.attn_q.weight");
  EXPECT_EQ(entry(es, "blk.0.attn_q.weight.rc_index").role, 2u);
  EXPECT_EQ(entry(es, "blk.0.attn_q.weight.rc_index").base, "blk.0.attn_q.weight");
  EXPECT_EQ(entry(es, "blk.0.attn_k.weight.group_params").role, 3u);
  EXPECT_EQ(entry(es, "blk.0.attn_k.weight.group_params").base, "blk.0.attn_k.weight");
}

TEST_F(BonsaiFile, RewriteIsByteIdentical) {
  const Bytes a = written(dir / "a.bonsai");
  const TensorSet ts = read_bonsai((dir / "a.bonsai").string());
  write_bonsai((dir / "b.bonsai").string(), ts.meta, ts.tensors);
  EXPECT_TRUE(read_bytes(dir / "b.bonsai") == a) << "read + write changed the bytes";
  write_bonsai((dir / "c.bonsai").string(), model.meta, model.tensors);
  EXPECT_TRUE(read_bytes(dir / "c.bonsai") == a) << "the same inputs gave different bytes";
}

TEST_F(BonsaiFile, HeaderFieldsFollowTheSpec) {
  const Bytes b = written(dir / "m.bonsai");
  EXPECT_EQ(std::memcmp(b.data(), "BONSAI\0\x1a", 8), 0);
  EXPECT_EQ(rd32(b, 8), 1u);
  EXPECT_EQ(rd32(b, 16), 64u);
  EXPECT_EQ(rd64(b, 24), model.meta.size() + 2);
  EXPECT_EQ(rd64(b, 32), kHeaderBytes);
  EXPECT_EQ(rd64(b, 48), model.tensors.size());
  EXPECT_EQ(rd64(b, 56), kHeaderBytes + rd64(b, 40));
  EXPECT_EQ(rd64(b, 72) % 64, 0u);
  EXPECT_EQ(rd64(b, 72) + rd64(b, 80), b.size());
  Bytes copy = b;
  rechecksum(copy);
  EXPECT_TRUE(copy == b) << "the header checksum does not follow spec §6";
  for (const EntryAt& e : parse_table(b)) {
    EXPECT_EQ(e.offset % 64, 0u) << e.name;
    EXPECT_EQ(rd64(b, e.checksum_at), XXH3_64bits(b.data() + rd64(b, 72) + e.offset, e.nbytes))
        << e.name;
  }
}

TEST_F(BonsaiFile, CallerProvenanceIsKept) {
  model.meta.set_str("bonsai.tool_version", "other-tool 9");
  model.meta.set_str("bonsai.created", "2020-02-29T12:00:00Z");
  const fs::path p = dir / "m.bonsai";
  write_bonsai(p.string(), model.meta, model.tensors);
  const TensorSet ts = read_bonsai(p.string());
  EXPECT_EQ(*ts.meta.get_str("bonsai.tool_version"), "other-tool 9");
  EXPECT_EQ(*ts.meta.get_str("bonsai.created"), "2020-02-29T12:00:00Z");
  EXPECT_EQ(ts.meta.size(), model.meta.size());
}

TEST_F(BonsaiFile, CreatedIsNowWithoutSourceDateEpoch) {
  ::unsetenv("SOURCE_DATE_EPOCH");
  auto iso = [](std::time_t t) {
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return std::string(buf);
  };
  const std::string before = iso(std::time(nullptr));
  const fs::path p = dir / "m.bonsai";
  write_bonsai(p.string(), model.meta, model.tensors);
  const std::string after = iso(std::time(nullptr));
  const std::string created = *read_bonsai(p.string()).meta.get_str("bonsai.created");
  EXPECT_LE(before, created);  // ISO-8601 UTC sorts as text
  EXPECT_LE(created, after);
}

TEST_F(BonsaiFile, BadSourceDateEpochIsRefused) {
  ::setenv("SOURCE_DATE_EPOCH", "17e8", 1);
  const fs::path p = dir / "m.bonsai";
  const std::string e = error_of([&] { write_bonsai(p.string(), model.meta, model.tensors); });
  EXPECT_NE(e.find(p.string()), std::string::npos) << e;
  EXPECT_NE(e.find("SOURCE_DATE_EPOCH"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST_F(BonsaiFile, AlignmentKeySetsTheAlignment) {
  model.meta.set_u32("bonsai.alignment", 256);
  const Bytes b = written(dir / "m.bonsai");
  EXPECT_EQ(rd32(b, 16), 256u);
  EXPECT_EQ(rd64(b, 72) % 256, 0u);
  const TensorSet ts = read_bonsai((dir / "m.bonsai").string());
  for (const Tensor& t : ts.tensors) EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 256, 0u) << t.name;

  model.meta.set_u32("bonsai.alignment", 48);
  const std::string e = error_of([&] { write_bonsai((dir / "x.bonsai").string(), model.meta, model.tensors); });
  EXPECT_NE(e.find("power of two"), std::string::npos) << e;
}

TEST_F(BonsaiFile, NoTensorsIsAValidFile) {
  const fs::path p = dir / "empty.bonsai";
  write_bonsai(p.string(), model.meta, {});
  const TensorSet ts = read_bonsai(p.string());
  EXPECT_TRUE(ts.tensors.empty());
  EXPECT_EQ(ts.meta.size(), model.meta.size() + 2);
  EXPECT_EQ(read_bytes(p).size() % 64, 0u);
}

// The worked example of the spec (docs/formats/bonsai.md §10) is what the writer produces, so
// the document cannot drift from the code.
TEST_F(BonsaiFile, SpecWorkedExampleIsWhatTheWriterWrites) {
  // BONSAI_SOURCE_DIR, not __FILE__: a compiler cache may make __FILE__ relative to the build folder.
  const fs::path doc = fs::path(BONSAI_SOURCE_DIR) / "docs/formats/bonsai.md";
  std::ifstream in(doc);
  ASSERT_TRUE(in) << doc;
  Bytes want;
  std::string line;
  bool in_example = false, in_dump = false;
  while (std::getline(in, line)) {
    if (line.starts_with("## 10.")) in_example = true;
    else if (in_example && line == "```") {
      if (in_dump) break;
      in_dump = true;
    } else if (in_dump) {  // "00000000: 42 4f 4e ...  BONSAI.."
      const std::string hexes = line.substr(10, line.find("  ", 10) - 10);
      for (size_t i = 0; i + 2 <= hexes.size(); i += 3)
        want.push_back(uint8_t(std::stoul(hexes.substr(i, 2), nullptr, 16)));
    }
  }
  ASSERT_EQ(want.size(), 336u) << "the example dump in " << doc << " did not parse";

  Metadata m;
  m.set_str("general.architecture", "llama");
  m.set_str("bonsai.tool_version", "0.1.0");  // the example's, whatever this build's version
  const float v[4] = {1, 2, 3, 4};
  Tensor t;
  t.name = "w";
  t.ne = {4};
  t.data = reinterpret_cast<const uint8_t*>(v);
  t.nbytes = sizeof v;
  const fs::path p = dir / "tiny.bonsai";
  write_bonsai(p.string(), m, std::span<const Tensor>(&t, 1));
  EXPECT_TRUE(read_bytes(p) == want) << "writer output differs from the spec's worked example";
}

// ---- checksums ----

TEST_F(BonsaiFile, FlippedTensorByteNamesTheTensor) {
  const fs::path p = dir / "m.bonsai";
  const Bytes good = written(p);
  const uint64_t data_offset = rd64(good, 72);
  for (const EntryAt& e : parse_table(good)) {
    Bytes bad = good;
    bad[data_offset + e.offset + e.nbytes / 2] ^= 0x10;
    write_bytes(p, bad);
    const std::string err = read_error(p);
    EXPECT_NE(err.find(p.string()), std::string::npos) << err;
    EXPECT_NE(err.find("checksum mismatch in tensor '" + e.name + "' (stored 0x"), std::string::npos) << err;
    EXPECT_NE(err.find(", computed 0x"), std::string::npos) << err;

    // Without verification the file loads, and the damaged byte is what is read.
    const TensorSet ts = read_bonsai(p.string(), {false});
    EXPECT_EQ(ts.get(e.name).data[e.nbytes / 2], bad[data_offset + e.offset + e.nbytes / 2]);
  }
}

TEST_F(BonsaiFile, FlippedHeaderRegionBitIsReported) {
  const fs::path p = dir / "m.bonsai";
  const Bytes good = written(p);
  const size_t end = region_end(good);
  const size_t data_offset = size_t(rd64(good, 72));
  for (size_t i = 0; i < data_offset; ++i) {
    poke(p, i, uint8_t(good[i] ^ (1u << (i % 8))));
    const std::string e = read_error(p);
    poke(p, i, good[i]);
    ASSERT_NE(e.find(p.string()), std::string::npos) << "byte " << i << ": " << e;
    // A changed section size moves the region's end: past the file, or a checksum over other bytes.
    const bool size_field = (i >= 40 && i < 48) || (i >= 64 && i < 72);
    std::string want = "header checksum mismatch";
    if (i < 8) want = "not a .bonsai file";
    else if (i < 12) want = "unsupported version";
    else if (i >= end) want = "padding byte at offset " + std::to_string(i);
    else if (size_field && e.find("extends past the end") != std::string::npos) want = "extends past";
    EXPECT_NE(e.find(want), std::string::npos) << "byte " << i << ": want '" << want << "', got: " << e;
  }
}

TEST_F(BonsaiFile, TruncationAnywhereIsAnError) {
  const fs::path p = dir / "m.bonsai";
  const Bytes good = written(p);
  for (size_t n = good.size(); n-- > 0;) {
    fs::resize_file(p, n);
    const std::string e = read_error(p, n % 2 == 0);  // also without checksum verification
    ASSERT_NE(e.find(p.string()), std::string::npos) << "truncated to " << n << ": " << e;
  }
  Bytes longer = good;
  longer.push_back(0);
  write_bytes(p, longer);  // one more byte than the header accounts for
  EXPECT_NE(read_error(p).find("bytes appended"), std::string::npos);
}

// ---- versions, flags, structure behind a valid checksum ----

TEST_F(BonsaiFile, HigherVersionIsRefused) {
  const fs::path p = dir / "m.bonsai";
  Bytes b = written(p);
  wr32(b, 8, 2);
  rechecksum(b);
  write_bytes(p, b);
  const std::string e = read_error(p);
  EXPECT_NE(e.find(p.string() + ": unsupported version 2"), std::string::npos) << e;
}

TEST_F(BonsaiFile, RequiredFlagsRefusedOptionalFlagsIgnored) {
  const fs::path p = dir / "m.bonsai";
  const Bytes good = written(p);
  Bytes b = good;
  wr32(b, 12, 1u << 3);
  rechecksum(b);
  write_bytes(p, b);
  EXPECT_NE(read_error(p).find("unsupported required flags 0x0000000000000008"), std::string::npos)
      << read_error(p);
  b = good;
  wr32(b, 12, 1u << 20);
  rechecksum(b);
  write_bytes(p, b);
  EXPECT_EQ(read_bonsai(p.string()).tensors.size(), model.tensors.size());
}

// Writes `good` with `patch` applied and the header checksum recomputed; returns the error.
std::string patched_error(const fs::path& p, const Bytes& good, const std::function<void(Bytes&)>& patch) {
  Bytes b = good;
  patch(b);
  rechecksum(b);
  write_bytes(p, b);
  return read_error(p);
}

TEST_F(BonsaiFile, TableFieldsAreValidated) {
  const fs::path p = dir / "m.bonsai";
  const Bytes good = written(p);
  const auto es = parse_table(good);
  const EntryAt& q = entry(es, "blk.0.attn_q.weight");
  const EntryAt& cb = entry(es, "blk.0.attn_q.weight.rc_codebook");
  struct Case {
    std::function<void(Bytes&)> patch;
    std::string want;
  } cases[] = {
      {[&](Bytes& b) { wr32(b, q.type_at, 77); }, "tensor 'blk.0.attn_q.weight': unknown type id 77"},
      {[&](Bytes& b) { wr32(b, q.type_at, uint32_t(TypeId::Q8_0)); }, "takes"},
      {[&](Bytes& b) { wr32(b, cb.role_at, 9); }, "unknown role 9"},
      {[&](Bytes& b) { wr32(b, cb.role_at, 2); }, "disagree with its name"},
      {[&](Bytes& b) { wr32(b, q.role_at, 1); }, "names no base tensor"},
      {[&](Bytes& b) { wr64(b, q.ne_at, 100); }, "not a multiple of PTQ1_0's block of 128"},
      {[&](Bytes& b) { wr64(b, q.ne_at, 0); }, "out of range"},
      {[&](Bytes& b) { wr64(b, q.ne_at + 8, uint64_t(1) << 62); }, "overflows 64 bits"},
      {[&](Bytes& b) { wr64(b, q.offset_at, q.offset + 64); }, "data offset"},
      {[&](Bytes& b) { wr64(b, q.nbytes_at, q.nbytes + 1); }, "takes"},
      {[&](Bytes& b) { wr64(b, 24, rd64(b, 24) + 1); }, "but the metadata has only 0 left"},
      {[&](Bytes& b) { wr64(b, 24, uint64_t(1) << 60); }, "pairs cannot fit"},
      {[&](Bytes& b) { wr64(b, 48, uint64_t(1) << 60); }, "entries cannot fit"},
      {[&](Bytes& b) { wr64(b, 48, rd64(b, 48) - 1); }, "bytes after the last of the"},
      {[&](Bytes& b) { wr32(b, 16, 48); }, "alignment 48"},
      {[&](Bytes& b) { wr32(b, 20, 1); }, "reserved"},
      {[&](Bytes& b) { wr64(b, 80, rd64(b, 80) - 1); }, "file is"},
      // Rename the base: the linked tensors now point at a name that is not in the file.
      {[&](Bytes& b) { b[q.name_at + 8 + q.name.size() - 1] = 'X'; },
       "links to base 'blk.0.attn_q.weight', which is not in the file"},
      // Give the second tensor the first one's name (same length, so the table stays parsable).
      {[&](Bytes& b) {
         const EntryAt& k = entry(es, "blk.0.attn_k.weight");
         std::memcpy(b.data() + k.name_at + 8, "blk.0.attn_q.weight", k.name.size());
       },
       "duplicate tensor name 'blk.0.attn_q.weight'"},
  };
  for (const Case& c : cases) {
    const std::string e = patched_error(p, good, c.patch);
    EXPECT_NE(e.find(p.string() + ": "), std::string::npos) << e;
    EXPECT_NE(e.find(c.want), std::string::npos) << "want '" << c.want << "', got: " << e;
  }
}

TEST_F(BonsaiFile, MetadataEncodingIsValidated) {
  Metadata m;
  m.set("big", KvValue::of_array(KvType::U32, {uint32_t(1), uint32_t(2)}));
  m.set_bool("bit", true);
  m.set_str("bonsai.plan", "{}");
  const fs::path p = dir / "m.bonsai";
  write_bonsai(p.string(), m, {});
  const Bytes good = read_bytes(p);
  auto after_key = [&](const std::string& key) {  // offset of the byte after the key
    const std::string pat = std::string(7, '\0') + key;  // high bytes of the u64 length, key
    auto it = std::search(good.begin(), good.end(), pat.begin(), pat.end());
    return size_t(it - good.begin()) + pat.size();
  };
  const size_t big = after_key("big"), bit = after_key("bit"), plan = after_key("bonsai.plan");
  struct Case {
    std::function<void(Bytes&)> patch;
    std::string want;
  } cases[] = {
      {[&](Bytes& b) { wr64(b, big + 8, uint64_t(1) << 20); }, "does not fit in the"},
      {[&](Bytes& b) { wr64(b, big + 8, uint64_t(1) << 61); }, "elements is longer than the 16777216 allowed"},
      {[&](Bytes& b) { wr32(b, big + 4, 9); }, "invalid array element type 9"},
      {[&](Bytes& b) { wr32(b, big, 13); }, "unknown value type 13"},
      {[&](Bytes& b) { b[bit + 4] = 2; }, "bool value 2 is neither 0 nor 1"},
      {[&](Bytes& b) { b[plan + 12] = '['; }, "'bonsai.plan' does not hold valid JSON"},
      {[&](Bytes& b) { b[bit - 1] = 'g'; }, "duplicate metadata key 'big'"},
      {[&](Bytes& b) { wr64(b, bit - 11, 0); }, "empty metadata key"},
      {[&](Bytes& b) { wr64(b, bit - 11, uint64_t(1) << 40); },
       "needs 1099511627776 bytes but the metadata has only"},
  };
  for (const Case& c : cases) {
    const std::string e = patched_error(p, good, c.patch);
    EXPECT_NE(e.find(p.string() + ": "), std::string::npos) << e;
    EXPECT_NE(e.find(c.want), std::string::npos) << "want '" << c.want << "', got: " << e;
  }
}

// Any change to the metadata or table, checksum recomputed, must load or fail with an Error
// naming the file: never a crash, another exception or a huge allocation (run under ASan).
TEST_F(BonsaiFile, CorruptionBehindAValidChecksumNeverCrashes) {
  const fs::path p = dir / "m.bonsai";
  const Bytes good = written(p);
  int loaded = 0, refused = 0;
  for (size_t i = kHeaderBytes; i < region_end(good); ++i)
    for (uint8_t x : {uint8_t(1u << (i % 8)), uint8_t(0xFF)}) {
      Bytes b = good;
      b[i] ^= x;
      rechecksum(b);
      overwrite(p, b);
      try {
        read_bonsai(p.string());
        ++loaded;  // e.g. a changed number inside a metadata value
      } catch (const Error& e) {
        ++refused;
        ASSERT_NE(std::string(e.what()).find(p.string() + ": "), std::string::npos) << e.what();
      }
    }
  EXPECT_GT(refused, 0);
  EXPECT_GT(loaded, 0);
}

TEST_F(BonsaiFile, NotABonsaiFile) {
  const fs::path p = dir / "x.gguf";
  write_bytes(p, Bytes{'G', 'G', 'U', 'F', 3, 0, 0, 0});
  EXPECT_NE(read_error(p).find(p.string() + ": not a .bonsai file"), std::string::npos);
  EXPECT_NE(read_error(dir / "absent.bonsai").find("absent.bonsai"), std::string::npos);
}

// ---- the writer refuses what the reader would refuse, and leaves nothing behind ----

TEST_F(BonsaiFile, MissingBaseIsRefusedByTheWriter) {
  model.add("blk.9.attn_v.weight.rc_codebook", TypeId::F16, {4, 4});
  const fs::path p = dir / "m.bonsai";
  const std::string e = error_of([&] { write_bonsai(p.string(), model.meta, model.tensors); });
  EXPECT_NE(e.find(p.string()), std::string::npos) << e;
  EXPECT_NE(e.find("links to base 'blk.9.attn_v.weight', which is not in the file"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST_F(BonsaiFile, WriterRefusesBadInput) {
  const fs::path p = dir / "m.bonsai";
  struct Case {
    std::function<void(Model&)> change;
    std::string want;
  } cases[] = {
      {[](Model& m) { m.tensors[1].nbytes -= 1; }, "takes"},
      {[](Model& m) { m.tensors[1].type = TypeId(77); }, "unknown type id 77"},
      {[](Model& m) { m.tensors[1].ne = {100, 2}; }, "cannot hold shape"},
      {[](Model& m) { m.tensors[2].name = m.tensors[1].name; }, "duplicate tensor name"},
      {[](Model& m) { m.meta.set_str("bonsai.plan", "{not json"); }, "valid JSON"},
      {[](Model& m) { m.meta.set_str("bonsai.provenance.source_sha256", "ABC"); }, "hex"},
      {[](Model& m) { m.meta.set_u32("bonsai.created", 5); }, "expected string"},
      {[](Model& m) { m.meta.set("x", KvValue::of_array(KvType::ARRAY, {})); }, "do not nest"},
      {[](Model& m) { KvValue v = KvValue::of(1.0f); v.type = KvType::U32; m.meta.set("x", v); },
       "declared u32 but holds f32"},
  };
  for (const Case& c : cases) {
    Model m = small_model();
    c.change(m);
    const std::string e = error_of([&] { write_bonsai(p.string(), m.meta, m.tensors); });
    EXPECT_NE(e.find(p.string() + ": "), std::string::npos) << e;
    EXPECT_NE(e.find(c.want), std::string::npos) << "want '" << c.want << "', got: " << e;
    EXPECT_TRUE(fs::is_empty(dir)) << c.want;
  }
}

TEST_F(BonsaiFile, WritingIntoAMissingFolderFails) {
  const fs::path p = dir / "no-such-folder" / "m.bonsai";
  const std::string e = error_of([&] { write_bonsai(p.string(), model.meta, model.tensors); });
  EXPECT_NE(e.find(p.string()), std::string::npos) << e;
  EXPECT_TRUE(fs::is_empty(dir)) << "a temporary file was left behind";
}

TEST_F(BonsaiFile, FailedRewriteKeepsTheOldFile) {
  const fs::path p = dir / "m.bonsai";
  const Bytes before = written(p);
  model.tensors[0].nbytes += 4;
  EXPECT_THROW(write_bonsai(p.string(), model.meta, model.tensors), Error);
  EXPECT_TRUE(read_bytes(p) == before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

}  // namespace
}  // namespace bonsai
