#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "formats/error.h"
#include "formats/fp16.h"
#include "safetensors_fixture.h"
#include "support.h"

namespace bonsai {
namespace {

using test::make_safetensors;
using test::make_safetensors_raw;
using test::StTensor;

uint64_t u64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

using test::expect_error;

// A valid three-tensor file (F32, F16, BF16) used by the damage tests.
std::vector<uint8_t> small_file(uint64_t* header_bytes = nullptr) {
  std::vector<uint8_t> h16 = {0x00, 0x3c, 0x00, 0xc0};  // 1.0, -2.0 as F16
  std::vector<uint8_t> b16 = {0x80, 0x3f, 0x40, 0x40};  // 1.0, 3.0 as BF16
  return make_safetensors(
      {{"a.weight", "F32", {2, 3}, test::f32_ramp(6)}, {"b", "F16", {2}, h16}, {"c", "BF16", {1, 2}, b16}},
      {{"format", "pt"}}, header_bytes);
}

TEST(Safetensors, ZhTinyQwen3MatchesItsOwnHeader) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/model.safetensors");
  const std::string path = test::shared_file("models/zh-tiny-qwen3/model.safetensors").string();
  const TensorSet set = read_safetensors(path);
  EXPECT_EQ(set.format, "safetensors");
  EXPECT_EQ(set.path, path);
  ASSERT_EQ(set.tensors.size(), 68u);
  EXPECT_EQ(set.meta.get_str("safetensors.format"), "pt");

  const Tensor& embd = set.get("model.embed_tokens.weight");
  EXPECT_EQ(embd.type, TypeId::BF16);
  EXPECT_EQ(embd.ne, (std::vector<int64_t>{256, 151936}));
  EXPECT_EQ(set.get("model.layers.0.self_attn.q_proj.weight").ne, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(set.get("model.layers.3.self_attn.k_proj.weight").ne, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(set.get("model.layers.5.mlp.gate_proj.weight").ne, (std::vector<int64_t>{256, 768}));
  EXPECT_EQ(set.get("model.layers.5.mlp.down_proj.weight").ne, (std::vector<int64_t>{768, 256}));
  EXPECT_EQ(set.get("model.layers.2.self_attn.q_norm.weight").ne, (std::vector<int64_t>{64}));

  // Independent reading: the test's own parse of the header, raw bytes at its offsets.
  const auto bytes = test::read_bytes(path);
  const uint64_t n = u64le(bytes.data());
  const auto header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + long(n));
  size_t checked = 0;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const Tensor& t = set.get(name);
    std::vector<int64_t> shape = e["shape"].get<std::vector<int64_t>>();
    EXPECT_EQ(t.ne, std::vector<int64_t>(shape.rbegin(), shape.rend())) << name;
    EXPECT_EQ(std::string(traits(t.type).name), e["dtype"].get<std::string>()) << name;
    const uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    ASSERT_EQ(t.nbytes, end - begin) << name;
    EXPECT_EQ(std::memcmp(t.data, bytes.data() + 8 + n + begin, t.nbytes), 0) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 68u);

  // A few embedding values through the type table, against the raw BF16 bits widened by hand.
  const uint64_t off = 8 + n + header["model.embed_tokens.weight"]["data_offsets"][0].get<uint64_t>();
  float got[16];
  traits(TypeId::BF16).to_float(embd.data + 2 * 256 * 1000, got, 16);  // row 1000
  for (int i = 0; i < 16; ++i) {
    const uint64_t at = off + 2 * (256 * 1000 + uint64_t(i));
    const uint32_t bits = uint32_t(bytes[at] | bytes[at + 1] << 8) << 16;
    float want;
    std::memcpy(&want, &bits, 4);
    EXPECT_EQ(got[i], want) << i;
  }
}

TEST(Safetensors, ReadsShapesTypesAndValues) {
  const auto dir = test::scratch_dir();
  const std::string path = (dir / "m.safetensors").string();
  test::write_bytes(path, small_file());
  const TensorSet set = read_safetensors(path);
  ASSERT_EQ(set.tensors.size(), 3u);
  EXPECT_EQ(set.tensors[0].name, "a.weight");  // file order
  const Tensor& a = set.get("a.weight");
  EXPECT_EQ(a.ne, (std::vector<int64_t>{3, 2}));
  float v[6];
  std::memcpy(v, a.data, sizeof v);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v[i], float(i));
  const Tensor& b = set.get("b");
  EXPECT_EQ(b.type, TypeId::F16);
  float f[2];
  traits(b.type).to_float(b.data, f, 2);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  const Tensor& c = set.get("c");
  EXPECT_EQ(c.type, TypeId::BF16);
  EXPECT_EQ(c.ne, (std::vector<int64_t>{2, 1}));
  traits(c.type).to_float(c.data, f, 2);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 3.0f);
}

TEST(Safetensors, ReadsShardsThroughTheIndex) {
  const auto dir = test::scratch_dir();
  test::write_bytes(dir / "model-00001-of-00002.safetensors",
                    make_safetensors({{"x", "F32", {4}, test::f32_ramp(4, 10)},
                                      {"y", "F32", {2, 2}, test::f32_ramp(4, 20)}}));
  test::write_bytes(dir / "model-00002-of-00002.safetensors",
                    make_safetensors({{"z", "F32", {1}, test::f32_ramp(1, 30)}}));
  const nlohmann::json index = {{"metadata", {{"total_size", 36}}},
                                {"weight_map",
                                 {{"x", "model-00001-of-00002.safetensors"},
                                  {"y", "model-00001-of-00002.safetensors"},
                                  {"z", "model-00002-of-00002.safetensors"}}}};
  const std::string ipath = (dir / "model.safetensors.index.json").string();
  const std::string s = index.dump();
  test::write_bytes(ipath, std::vector<uint8_t>(s.begin(), s.end()));
  const TensorSet set = read_safetensors(ipath);
  EXPECT_EQ(set.path, ipath);
  ASSERT_EQ(set.tensors.size(), 3u);
  float v[4];
  std::memcpy(v, set.get("y").data, 16);
  EXPECT_EQ(v[3], 23.f);
  std::memcpy(v, set.get("z").data, 4);
  EXPECT_EQ(v[0], 30.f);
  EXPECT_EQ(set.get("x").ne, (std::vector<int64_t>{4}));
}

TEST(Safetensors, EveryTruncationIsANamedError) {
  const auto dir = test::scratch_dir();
  const auto good = small_file();
  const auto d = test::damage_file(dir / "cut.safetensors", good, 0, good.size(),
                                   [](const std::string& p) { (void)read_safetensors(p); });
  EXPECT_EQ(d.cuts_refused, good.size());
}

TEST(Safetensors, FlippedHeaderBytesNeverCrash) {
  const auto dir = test::scratch_dir();
  uint64_t n = 0;
  const auto good = small_file(&n);
  const std::string path = (dir / "flip.safetensors").string();
  size_t errors = 0, reads = 0;
  for (size_t i = 0; i < 8 + n; ++i)
    for (uint8_t x : {0x01, 0x20, 0x80, 0xff}) {
      auto bad = good;
      bad[i] ^= x;
      test::write_bytes(path, bad);
      try {
        const TensorSet set = read_safetensors(path);
        ++reads;  // e.g. a flipped padding space or key letter: still a consistent file
        for (const Tensor& t : set.tensors) {
          // What was read is the file's own bytes, of the size the shape says.
          ASSERT_EQ(t.nbytes, *tensor_bytes(t.type, t.ne));
          const std::vector<uint8_t> got(t.data, t.data + t.nbytes);
          EXPECT_NE(std::search(bad.begin() + long(8 + n), bad.end(), got.begin(), got.end()), bad.end());
        }
      } catch (const Error& e) {
        ++errors;
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      }
    }
  EXPECT_GT(errors, 8 + n);  // nearly every flip breaks the JSON or its numbers
  EXPECT_GT(reads, 0u);
}

TEST(Safetensors, HeaderLengthBounded) {
  const auto dir = test::scratch_dir();
  const std::string path = (dir / "len.safetensors").string();
  auto bad = small_file();
  for (uint64_t n : {uint64_t(bad.size() - 7), uint64_t(1) << 40, ~uint64_t(0)}) {
    for (int i = 0; i < 8; ++i) bad[size_t(i)] = uint8_t(n >> (8 * i));
    test::write_bytes(path, bad);
    expect_error([&] { read_safetensors(path); }, path);
  }
  // Within the file but over the 100 MB limit: a sparse file, so nothing is written to disk.
  const uint64_t big = (100ull << 20) + 8;
  for (int i = 0; i < 8; ++i) bad[size_t(i)] = uint8_t(big >> (8 * i));
  test::write_bytes(path, bad);
  ASSERT_EQ(::truncate(path.c_str(), off_t(big + 16)), 0);
  const std::string msg = expect_error([&] { read_safetensors(path); }, path);
  EXPECT_NE(msg.find("larger than"), std::string::npos) << msg;
}

TEST(Safetensors, BadEntriesAreNamedErrors) {
  const auto dir = test::scratch_dir();
  const std::string path = (dir / "bad.safetensors").string();
  const auto data = test::f32_ramp(4);
  struct Case {
    std::string header;
    std::string needle;  // part of the expected message
  };
  const Case cases[] = {
      {R"({"w":{"dtype":"I8","shape":[16],"data_offsets":[0,16]}})", "'w': dtype I8"},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", "'w': data_offsets cover 16 bytes"},
      {R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", "past the data section"},
      {R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[16,8]}})", "run backwards"},
      {R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", "non-negative integer"},
      {R"({"w":{"dtype":"F32","shape":[2.0,2],"data_offsets":[0,16]}})", "non-negative integer"},
      {R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,16]}})", "shape must be an array"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", "two integers"},
      {R"({"w":{"dtype":"F32","shape":[4]}})", "needs dtype"},
      {R"({"w":{"dtype":"F32","shape":[1,1,1,1,4],"data_offsets":[0,16]}})", "5 dimensions"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,16]}})", "too many"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       "overlap"},
      {R"({"w":[]})", "'w': entry must be an object"},
      {R"([1,2])", "header must be a JSON object"},
      {R"({"w":)", "invalid JSON"},
      {std::string(200, '[') + std::string(200, ']'), "nested deeper"},
  };
  for (const Case& c : cases) {
    test::write_bytes(path, make_safetensors_raw(c.header, data));
    const std::string msg = expect_error([&] { read_safetensors(path); }, path);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.header << " -> " << msg;
  }
}

TEST(Safetensors, BadIndexesAreNamedErrors) {
  const auto dir = test::scratch_dir();
  test::write_bytes(dir / "a.safetensors", make_safetensors({{"x", "F32", {1}, test::f32_ramp(1)}}));
  test::write_bytes(dir / "b.safetensors", make_safetensors({{"x", "F32", {1}, test::f32_ramp(1)},
                                                             {"y", "F32", {1}, test::f32_ramp(1)}}));
  const std::string ipath = (dir / "model.safetensors.index.json").string();
  struct Case {
    nlohmann::json index;
    std::string file;    // the file the message must name
    std::string needle;  // part of the message
  };
  const Case cases[] = {
      {{{"weight_map", {{"x", "missing.safetensors"}}}}, "missing.safetensors", "cannot open"},
      {{{"weight_map", {{"x", "../x.safetensors"}}}}, ipath, "not a plain file name"},
      {{{"weight_map", {{"x", "/etc/passwd"}}}}, ipath, "not a plain file name"},
      {{{"weight_map", {{"x", ".."}}}}, ipath, "not a plain file name"},
      {{{"weight_map", {{"x", 3}}}}, ipath, "must be a file name"},
      {{{"weight_map", nlohmann::json::object()}}, ipath, "empty"},
      {{{"metadata", {}}}, ipath, "no weight_map"},
      {{{"weight_map", {{"x", "a.safetensors"}, {"q", "a.safetensors"}}}}, ipath, "'q' in a.safetensors"},
      {{{"weight_map", {{"x", "a.safetensors"}, {"y", "b.safetensors"}}}},
       "b.safetensors",
       "also in another shard"},
      {{{"weight_map", {{"y", "b.safetensors"}}}}, ipath, "does not list"},
  };
  for (const Case& c : cases) {
    const std::string s = c.index.dump();
    test::write_bytes(ipath, std::vector<uint8_t>(s.begin(), s.end()));
    const std::string msg = expect_error([&] { read_safetensors(ipath); }, c.file);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << s << " -> " << msg;
  }
  test::write_bytes(ipath, {'{', '"'});
  expect_error([&] { read_safetensors(ipath); }, ipath);
}

}  // namespace
}  // namespace bonsai
