// GGUF reader and writer: round trips (every KV type, several tensor types, custom alignment),
// files made by llama.cpp, and bad input (truncation, byte flips, crafted fields), which must
// always end in a bonsai::Error naming the file — never a crash, a hang or a huge allocation.
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <random>

#include "formats/error.h"
#include "support.h"

namespace bonsai {
namespace {

namespace fs = std::filesystem;
using test::read_bytes;
using test::scratch_dir;
using test::write_bytes;

// Tensors built in memory; their bytes live in `store` for the test's lifetime.
struct Tensors {
  std::deque<std::vector<uint8_t>> store;
  std::vector<Tensor> list;

  void add(const std::string& name, TypeId type, std::vector<int64_t> ne, uint32_t seed) {
    const uint64_t n = *tensor_bytes(type, ne);
    std::mt19937 rng(seed);
    auto& bytes = store.emplace_back(n);
    for (auto& x : bytes) x = uint8_t(rng());
    list.push_back(Tensor{name, type, std::move(ne), bytes.data(), n});
  }
};

void expect_same_tensors(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].name);
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].type, want[i].type);
    EXPECT_EQ(got[i].ne, want[i].ne);
    ASSERT_EQ(got[i].nbytes, want[i].nbytes);
    if (got[i].nbytes > 0) {
      EXPECT_EQ(std::memcmp(got[i].data, want[i].data, got[i].nbytes), 0);
    }
  }
}

// Position of `needle` in `hay` (the first), failing the test when absent.
size_t find_bytes(const std::vector<uint8_t>& hay, const void* needle, size_t n) {
  const auto* p = static_cast<const uint8_t*>(needle);
  auto it = std::search(hay.begin(), hay.end(), p, p + n);
  EXPECT_NE(it, hay.end()) << "pattern not found";
  return size_t(it - hay.begin());
}
size_t find_str(const std::vector<uint8_t>& hay, const std::string& s) { return find_bytes(hay, s.data(), s.size()); }

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + at, &v, sizeof(T));
}
template <typename T>
T peek(const std::vector<uint8_t>& bytes, size_t at) {
  T v{};
  EXPECT_LE(at + sizeof(T), bytes.size());
  if (at + sizeof(T) <= bytes.size()) std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

// read_gguf must throw a bonsai::Error naming the path and containing every `parts`.
void expect_error(const fs::path& p, std::initializer_list<std::string> parts) {
  try {
    read_gguf(p.string());
    ADD_FAILURE() << "no error for " << p;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
}

Metadata every_kv_type() {
  Metadata m;
  m.set("general.architecture", KvValue::of(std::string("llama")));
  m.set_u32("general.alignment", 64);
  m.set("t.u8", KvValue::of(uint8_t(200)));
  m.set("t.i8", KvValue::of(int8_t(-100)));
  m.set("t.u16", KvValue::of(uint16_t(60000)));
  m.set("t.i16", KvValue::of(int16_t(-30000)));
  m.set("t.u32", KvValue::of(uint32_t(4000000000u)));
  m.set("t.i32", KvValue::of(int32_t(-2000000000)));
  m.set("t.f32", KvValue::of(1.5e-7f));
  m.set("t.bool_true", KvValue::of(true));
  m.set("t.bool_false", KvValue::of(false));
  m.set("t.string", KvValue::of(std::string("héllo\nworld")));
  m.set("t.empty_string", KvValue::of(std::string()));
  m.set("t.u64", KvValue::of(uint64_t(0xFEDCBA9876543210ull)));
  m.set("t.i64", KvValue::of(int64_t(-0x123456789ABCDEFll)));
  m.set("t.f64", KvValue::of(3.141592653589793));
  m.set("t.arr_u8", KvValue::of_array(KvType::U8, {uint8_t(1), uint8_t(255)}));
  m.set("t.arr_i8", KvValue::of_array(KvType::I8, {int8_t(-1), int8_t(127)}));
  m.set("t.arr_u16", KvValue::of_array(KvType::U16, {uint16_t(7)}));
  m.set("t.arr_i16", KvValue::of_array(KvType::I16, {int16_t(-7), int16_t(8), int16_t(9)}));
  m.set("t.arr_u32", KvValue::of_array(KvType::U32, {uint32_t(1), uint32_t(2)}));
  m.set_i32s("t.arr_i32", {-1, 0, 1, 2147483647});
  m.set_f32s("t.arr_f32", {0.25f, -1e30f});
  m.set("t.arr_bool", KvValue::of_array(KvType::BOOL, {true, false, true}));
  m.set_strings("t.arr_str", {"<s>", "", "▁the", std::string("a\0b", 3)});
  m.set("t.arr_u64", KvValue::of_array(KvType::U64, {uint64_t(1) << 63}));
  m.set("t.arr_i64", KvValue::of_array(KvType::I64, {int64_t(-5)}));
  m.set("t.arr_f64", KvValue::of_array(KvType::F64, {1e300, -0.0}));
  m.set("t.arr_empty_u32", KvValue::of_array(KvType::U32, {}));
  m.set("t.arr_empty_str", KvValue::of_array(KvType::STRING, {}));
  return m;
}

TEST(Gguf, RoundTripEveryKvTypeAndTensorType) {
  const Metadata meta = every_kv_type();
  Tensors t;
  t.add("f32", TypeId::F32, {3, 5}, 1);  // 60 bytes: the next tensor must start at 64
  t.add("f16", TypeId::F16, {16, 2, 3}, 2);
  t.add("q8", TypeId::Q8_0, {64, 3}, 3);
  t.add("ptq1", TypeId::PTQ1_0, {128, 2, 1, 2}, 4);
  t.add("pq2", TypeId::PQ2_0, {256}, 5);
  t.add("empty", TypeId::F32, {4, 0}, 6);

  const auto dir = scratch_dir();
  const auto a = dir / "a.gguf", b = dir / "b.gguf";
  write_gguf(a.string(), meta, t.list);
  const TensorSet got = read_gguf(a.string());
  EXPECT_EQ(got.format, "gguf");
  EXPECT_EQ(got.path, a.string());
  EXPECT_TRUE(got.meta == meta);
  ASSERT_EQ(got.meta.items().size(), meta.items().size());
  for (size_t i = 0; i < meta.items().size(); ++i) EXPECT_EQ(got.meta.items()[i].first, meta.items()[i].first);
  expect_same_tensors(got.tensors, t.list);

  // The alignment (64) is honoured: every non-empty tensor's data sits at a multiple of 64.
  const auto bytes = read_bytes(a);
  for (const Tensor& x : t.list)
    if (x.nbytes > 0) {
      EXPECT_EQ(find_bytes(bytes, x.data, x.nbytes) % 64, 0u) << x.name;
    }
  EXPECT_EQ(bytes.size() % 64, 0u);

  write_gguf(b.string(), got.meta, got.tensors);
  EXPECT_EQ(read_bytes(b), bytes);
}

TEST(Gguf, DefaultAlignmentIs32AndV2IsAccepted) {
  Metadata meta;
  meta.set_str("general.architecture", "llama");
  Tensors t;
  t.add("x", TypeId::F32, {5}, 1);  // 20 bytes
  t.add("y", TypeId::F32, {3}, 2);
  const auto p = scratch_dir() / "d.gguf";
  write_gguf(p.string(), meta, t.list);
  auto bytes = read_bytes(p);
  EXPECT_EQ(find_bytes(bytes, t.list[0].data, 20) % 32, 0u);
  EXPECT_EQ(find_bytes(bytes, t.list[1].data, 12) - find_bytes(bytes, t.list[0].data, 20), 32u);
  EXPECT_EQ(bytes.size() % 32, 0u);
  EXPECT_EQ(peek<uint32_t>(bytes, 4), 3u);

  // Version 2 has the same little-endian layout as 3.
  poke<uint32_t>(bytes, 4, 2);
  write_bytes(p, bytes);
  const TensorSet v2 = read_gguf(p.string());
  EXPECT_TRUE(v2.meta == meta);
  expect_same_tensors(v2.tensors, t.list);
}

TEST(Gguf, Stories260K) {
  const std::string rel = "models/stories260K/stories260K.gguf";
  BONSAI_REQUIRE_SHARED(rel);
  const auto src = test::shared_file(rel);
  const TensorSet m = read_gguf(src.string());
  ASSERT_EQ(m.tensors.size(), 48u);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"token_embd.weight", {64, 512}},    {"blk.0.attn_q.weight", {64, 64}},
      {"blk.0.attn_k.weight", {64, 32}},   {"blk.0.attn_v.weight", {64, 32}},
      {"blk.0.ffn_gate.weight", {64, 172}}, {"blk.4.ffn_down.weight", {172, 64}},
      {"output_norm.weight", {64}},        {"output.weight", {64, 512}},
  };
  for (const auto& [name, ne] : shapes) {
    const Tensor& t = m.get(name);
    EXPECT_EQ(t.ne, ne) << name;
    EXPECT_EQ(t.type, TypeId::F32) << name;
  }
  EXPECT_EQ(m.arch(), "llama");
  EXPECT_EQ(m.meta.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(m.meta.get_int("llama.block_count"), 5);
  EXPECT_EQ(m.meta.get_str("tokenizer.ggml.model"), "llama");
  const auto tokens = m.meta.get_strings("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens);
  EXPECT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ(m.meta.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(m.meta.get_int("tokenizer.ggml.eos_token_id"), 2);

  // Rewriting what llama.cpp wrote gives the same bytes: same order, alignment and padding.
  const auto out = scratch_dir() / "rewritten.gguf";
  write_gguf(out.string(), m.meta, m.tensors);
  const TensorSet again = read_gguf(out.string());
  EXPECT_TRUE(again.meta == m.meta);
  expect_same_tensors(again.tensors, m.tensors);
  EXPECT_TRUE(read_bytes(out) == read_bytes(src)) << "rewrite is not byte-identical";
}

TEST(Gguf, VocabOnlyFiles) {
  for (const auto& [rel, n] : std::vector<std::pair<std::string, size_t>>{
           {"tokenizers/qwen3/qwen3-vocab.gguf", 151936},
           {"tokenizers/llamacpp-vocab/ggml-vocab-llama-spm.gguf", 32000}}) {
    SCOPED_TRACE(rel);
    if (!test::have_shared(rel)) GTEST_SKIP() << "fixture missing: " << rel;
    const TensorSet v = read_gguf(test::shared_file(rel).string());
    EXPECT_TRUE(v.tensors.empty());
    const auto tokens = v.meta.get_strings("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens);
    EXPECT_EQ(tokens->size(), n);
  }
}

// A small valid file for the bad-input tests. Its last tensor is 64 bytes, a multiple of the
// alignment, so the file ends exactly where the last tensor's data ends: any cut breaks it.
struct Sample {
  Metadata meta;
  Tensors t;
  Sample() {
    meta.set_str("general.architecture", "llama");
    meta.set_u32("general.alignment", 32);
    meta.set("test.key_a", KvValue::of(uint32_t(7)));
    meta.set("test.key_b", KvValue::of(true));
    meta.set_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "hello"});
    meta.set_f32("llama.rope.freq_base", 10000.0f);
    t.add("a.weight", TypeId::Q8_0, {64, 2}, 11);  // 136 bytes, padded to 160
    t.add("b.weight", TypeId::F16, {16}, 12);
    t.add("c.weight", TypeId::F32, {8, 2}, 13);
  }
  std::vector<uint8_t> bytes(const fs::path& p) {
    write_gguf(p.string(), meta, t.list);
    return read_bytes(p);
  }
};

// Reads `bytes` written to `p`: it must parse into something self-consistent or throw an Error
// naming `p`. Returns whether it threw.
bool parse_or_error(const fs::path& p, const std::vector<uint8_t>& bytes) {
  write_bytes(p, bytes);
  try {
    const TensorSet s = read_gguf(p.string());
    uint64_t sum = 0;
    for (const Tensor& t : s.tensors) {
      EXPECT_EQ(tensor_bytes(t.type, t.ne), t.nbytes) << t.name;
      for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];  // every byte must be readable
    }
    (void)sum;
    return false;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    return true;
  }
}

TEST(GgufBadInput, EveryTruncationIsAnError) {
  const auto dir = scratch_dir();
  Sample s;
  const auto good = s.bytes(dir / "good.gguf");
  ASSERT_EQ(read_gguf((dir / "good.gguf").string()).tensors.size(), 3u);
  const auto d = test::damage_file(dir / "cut.gguf", good, 0, good.size(),
                                   [](const std::string& p) { (void)read_gguf(p); });
  EXPECT_EQ(d.cuts_refused, good.size());
}

TEST(GgufBadInput, ByteFlipsNeverCrash) {
  const auto dir = scratch_dir();
  Sample s;
  const auto good = s.bytes(dir / "good.gguf");
  const auto p = dir / "flip.gguf";
  size_t errors = 0, runs = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    // xor flips every bit; 0x00 / 0x7F / 0xFF make length and count fields tiny or enormous.
    for (int pattern : {-1, 0x00, 0x7F, 0xFF}) {
      auto bad = good;
      bad[i] = pattern < 0 ? uint8_t(bad[i] ^ 0xFF) : uint8_t(pattern);
      if (bad == good) continue;
      SCOPED_TRACE(testing::Message() << "byte " << i << " pattern " << pattern);
      errors += parse_or_error(p, bad);
      ++runs;
    }
  }
  // The header, keys and tensor infos are most of this file: many changes must be refused.
  EXPECT_GT(errors, runs / 4);
}

TEST(GgufBadInput, CraftedFields) {
  const auto dir = scratch_dir();
  Sample s;
  const auto good = s.bytes(dir / "good.gguf");
  const auto p = dir / "bad.gguf";
  auto with = [&](auto edit) {
    auto b = good;
    edit(b);
    write_bytes(p, b);
  };
  // Field positions: a tensor info is name, u32 n_dims, n_dims x i64 ne, u32 type, u64 offset.
  auto info_at = [&](const std::string& name) { return find_str(good, name) + name.size(); };

  with([](auto& b) { b[3] = 'X'; });
  expect_error(p, {"not a GGUF file"});
  with([](auto& b) { poke<uint32_t>(b, 4, 4); });
  expect_error(p, {"version 4"});
  with([](auto& b) { poke<uint32_t>(b, 4, 1); });
  expect_error(p, {"version 1"});
  with([](auto& b) { poke<uint32_t>(b, 4, 0x03000000); });
  expect_error(p, {"big-endian"});
  with([](auto& b) { poke<uint64_t>(b, 16, uint64_t(1) << 60); });
  expect_error(p, {"truncated", "1152921504606846976 metadata pairs"});
  with([](auto& b) { poke<uint64_t>(b, 8, uint64_t(1) << 60); });
  expect_error(p, {"truncated", "1152921504606846976 tensors"});
  with([](auto& b) { poke<uint64_t>(b, 24, uint64_t(1) << 63); });
  expect_error(p, {"truncated", "needs 9223372036854775808 bytes", "metadata pair 0"});

  const size_t align_val = find_str(good, "general.alignment") + 17 + 4;
  ASSERT_EQ(peek<uint32_t>(good, align_val), 32u);
  with([&](auto& b) { poke<uint32_t>(b, align_val, 3); });
  expect_error(p, {"general.alignment", "3", "power of two"});
  with([&](auto& b) { poke<uint32_t>(b, align_val - 4, uint32_t(KvType::I32)); });
  expect_error(p, {"general.alignment", "must be u32"});

  with([&](auto& b) { b[find_str(good, "test.key_b") + 9] = 'a'; });
  expect_error(p, {"duplicate metadata key 'test.key_a'"});
  with([&](auto& b) { poke<uint32_t>(b, find_str(good, "test.key_a") + 10, 13); });
  expect_error(p, {"test.key_a", "unknown value type 13"});
  with([&](auto& b) { b[find_str(good, "test.key_b") + 10 + 4] = 2; });
  expect_error(p, {"test.key_b", "bool value 2"});
  const size_t tokens_elem = find_str(good, "tokenizer.ggml.tokens") + 21 + 4;
  ASSERT_EQ(peek<uint32_t>(good, tokens_elem), uint32_t(KvType::STRING));
  with([&](auto& b) { poke<uint32_t>(b, tokens_elem, uint32_t(KvType::ARRAY)); });
  expect_error(p, {"tokenizer.ggml.tokens", "nested array"});
  with([&](auto& b) { poke<uint64_t>(b, tokens_elem + 4, uint64_t(1) << 24); });
  expect_error(p, {"truncated", "array of 16777216 string"});
  // Longer than any real array: refused before the bytes are even counted, since every element
  // would take a 40-byte KvScalar (a u8 array would ask for 40 times the file).
  with([&](auto& b) { poke<uint64_t>(b, tokens_elem + 4, (uint64_t(1) << 24) + 1); });
  expect_error(p, {"tokenizer.ggml.tokens", "array of 16777217 elements is longer than the 16777216 allowed"});

  // a.weight: 2 dims, Q8_0; b.weight: 1 dim; c.weight: 2 dims, the last tensor.
  const size_t a = info_at("a.weight"), b_ = info_at("b.weight"), c = info_at("c.weight");
  ASSERT_EQ(peek<uint32_t>(good, b_ + 4 + 8), uint32_t(TypeId::F16));
  with([&](auto& b) { poke<uint32_t>(b, b_ + 4 + 8, 199); });
  expect_error(p, {"tensor 'b.weight' has unknown type id 199"});
  ASSERT_EQ(peek<int64_t>(good, a + 4), 64);
  with([&](auto& b) { poke<int64_t>(b, a + 4, 48); });
  expect_error(p, {"a.weight", "ne[0] = 48", "Q8_0", "32"});
  with([&](auto& b) { poke<int64_t>(b, a + 4 + 8, -2); });
  expect_error(p, {"a.weight", "negative"});
  with([&](auto& b) { poke<int64_t>(b, a + 4 + 8, int64_t(1) << 62); });
  expect_error(p, {"a.weight", "more bytes than the file has"});
  with([&](auto& b) { poke<uint32_t>(b, a, 5); });
  expect_error(p, {"a.weight", "5 dimensions"});
  with([&](auto& b) { poke<uint32_t>(b, a, 0); });
  expect_error(p, {"a.weight", "0 dimensions"});

  const size_t c_offset = c + 4 + 16 + 4;
  ASSERT_EQ(peek<uint64_t>(good, c_offset), 160u + 32u);  // 136 -> 160, 32 -> 32
  with([&](auto& b) { poke<uint64_t>(b, c_offset, uint64_t(1) << 40); });
  expect_error(p, {"tensor 'c.weight' has data offset 1099511627776, expected 192"});
  with([&](auto& b) { poke<uint64_t>(b, c_offset, 160); });  // aligned, overlapping b.weight
  expect_error(p, {"c.weight", "expected 192"});
  with([&](auto& b) { b.pop_back(); });
  expect_error(p, {"tensor 'c.weight' data", "runs past the end of the file"});
  with([&](auto& b) { std::memcpy(b.data() + find_str(good, "c.weight"), "a", 1); });
  expect_error(p, {"duplicate tensor name 'a.weight'"});
}

// Files the writer refuses to make, assembled byte by byte.
TEST(GgufBadInput, HandAssembledInfos) {
  auto file = [](const std::string& name, std::vector<int64_t> ne) {
    std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
    auto put = [&](auto v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      b.insert(b.end(), p, p + sizeof v);
    };
    put(uint32_t(3)), put(uint64_t(1)), put(uint64_t(0));
    put(uint64_t(name.size()));
    b.insert(b.end(), name.begin(), name.end());
    put(uint32_t(ne.size()));
    for (auto d : ne) put(d);
    put(uint32_t(TypeId::F32)), put(uint64_t(0));
    b.resize((b.size() + 31) / 32 * 32 + 64);  // padding and enough data for the valid case
    return b;
  };
  const auto p = scratch_dir() / "hand.gguf";
  write_bytes(p, file(std::string(63, 'n'), {16}));
  EXPECT_EQ(read_gguf(p.string()).tensors.at(0).name.size(), 63u);  // the builder itself is right
  write_bytes(p, file(std::string(64, 'n'), {16}));
  expect_error(p, {"64 bytes long", "63"});
  write_bytes(p, file("t", {4, 1, 1, 1, 1}));
  expect_error(p, {"tensor 't' has 5 dimensions"});
  // A row whose byte size wraps around 2^64 (found by the stats fuzz target: 4 x (2^62 + 4) is 16
  // mod 2^64, which fit the file, and load_stats then sized its arrays by the element count).
  write_bytes(p, file("t", {(int64_t(1) << 62) + 4}));
  expect_error(p, {"tensor 't'", "more bytes than the file has"});
  write_bytes(p, file("t", {(int64_t(1) << 62) + 4, 1}));
  expect_error(p, {"tensor 't'", "more bytes than the file has"});
}

TEST(GgufWriter, MissingFolderIsAnErrorNamingThePath) {
  const auto p = scratch_dir() / "no" / "such" / "dir" / "x.gguf";
  Sample s;
  try {
    write_gguf(p.string(), s.meta, s.t.list);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
  }
}

// Each bad input is refused with an Error naming the output and the culprit, and leaves the
// folder as it was: no output, no temporary, an existing file untouched.
TEST(GgufWriter, BadInputLeavesNothingBehind) {
  const auto dir = scratch_dir();
  const auto p = dir / "out.gguf";
  auto refused = [&](const Metadata& meta, const std::vector<Tensor>& tensors, const std::string& part) {
    try {
      write_gguf(p.string(), meta, tensors);
      ADD_FAILURE() << "no error for " << part;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
    }
  };
  auto folder = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    return names;
  };

  Sample s;
  auto tensors = s.t.list;
  tensors[1].nbytes -= 2;
  refused(s.meta, tensors, "b.weight");
  tensors = s.t.list;
  tensors[0].ne[0] = 48;
  refused(s.meta, tensors, "a.weight");
  tensors = s.t.list;
  tensors[2].name = std::string(64, 'x');
  refused(s.meta, tensors, "64 bytes long");
  tensors = s.t.list;
  tensors[2].name = tensors[0].name;
  refused(s.meta, tensors, "duplicate tensor name 'a.weight'");
  tensors = s.t.list;
  tensors[1].type = TypeId(199);
  refused(s.meta, tensors, "199");
  Metadata meta = s.meta;
  meta.set_u32("general.alignment", 3);
  refused(meta, s.t.list, "general.alignment");
  meta = s.meta;
  KvValue lie = KvValue::of(uint32_t(1));
  lie.type = KvType::STRING;
  meta.set("test.lie", lie);
  refused(meta, s.t.list, "test.lie");
  EXPECT_TRUE(folder().empty());

  // A failed rewrite keeps the previous file as it was.
  write_gguf(p.string(), s.meta, s.t.list);
  const auto before = read_bytes(p);
  tensors = s.t.list;
  tensors[0].nbytes += 1;
  refused(s.meta, tensors, "a.weight");
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(folder(), std::vector<std::string>{"out.gguf"});
}

}  // namespace
}  // namespace bonsai
