#include "formats/llama2c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <set>

#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/llama2c_fixture.h"
#include "support.h"

namespace bonsai {
namespace {

using test::expect_error;

using namespace test::llama2c_fixture;

TEST(Llama2c, Stories260KIsByteIdenticalToLlamaCppConversion) {
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  BONSAI_REQUIRE_SHARED("models/stories260K/tok512.bin");
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const std::string bin = test::shared_file("models/stories260K/stories260K.bin").string();
  const TensorSet ours = read_llama2c(bin);  // finds tok512.bin beside it
  const TensorSet ref = read_gguf(test::shared_file("models/stories260K/stories260K.gguf").string());
  EXPECT_EQ(ours.format, "llama2c");

  ASSERT_EQ(ours.tensors.size(), ref.tensors.size());
  EXPECT_EQ(ours.tensors.size(), 48u);
  for (size_t i = 0; i < ref.tensors.size(); ++i) {
    const Tensor& a = ours.tensors[i];
    const Tensor& b = ref.tensors[i];
    EXPECT_EQ(a.name, b.name);  // same order as the converter writes
    EXPECT_EQ(a.type, b.type) << b.name;
    EXPECT_EQ(a.ne, b.ne) << b.name;
    ASSERT_EQ(a.nbytes, b.nbytes) << b.name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << b.name;
  }

  // Every key the converter wrote, with the same type and value, except where it differs on
  // purpose: context_length (the converter writes its default n_ctx 128, not the checkpoint's
  // seq_len), general.name (ours is the file's stem), and the "none" separator / padding ids.
  const std::set<std::string> differ = {"llama.context_length", "general.name",
                                        "tokenizer.ggml.seperator_token_id",
                                        "tokenizer.ggml.padding_token_id"};
  size_t same = 0;
  for (const auto& [key, value] : ref.meta.items()) {
    if (differ.count(key)) continue;
    const KvValue* v = ours.meta.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_TRUE(*v == value) << key << ": " << kv_to_string(*v) << " vs " << kv_to_string(value);
    ++same;
  }
  EXPECT_EQ(same, ref.meta.size() - differ.size());
  EXPECT_EQ(ref.meta.get_int("llama.context_length"), 128);
  const auto raw = test::read_bytes(bin);
  int32_t seq_len;
  std::memcpy(&seq_len, raw.data() + 24, 4);
  EXPECT_EQ(ours.meta.get_int("llama.context_length"), seq_len);
  EXPECT_EQ(ours.meta.get_str("general.name"), "stories260K");
  EXPECT_EQ(ref.meta.get_int("tokenizer.ggml.padding_token_id"), 0xffffffffLL);  // llama.cpp's "no token"
  EXPECT_EQ(ours.meta.get_strings("tokenizer.ggml.tokens")->size(), 512u);
  // Keys the converter leaves to llama.cpp's defaults, written out here.
  EXPECT_EQ(ours.meta.get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(ours.meta.get_int("general.file_type"), 0);
}

TEST(Llama2c, LayoutRegionsAndClassifier) {
  const auto dir = test::scratch_dir();
  for (bool shared : {true, false}) {
    Tiny tiny;
    tiny.shared = shared;
    const std::string path = (dir / (shared ? "shared.bin" : "separate.bin")).string();
    test::write_bytes(path, tiny.bytes());
    const TensorSet set = read_llama2c(path);
    EXPECT_FALSE(set.meta.has("tokenizer.ggml.tokens"));  // none beside it
    EXPECT_EQ(set.meta.get_int("llama.attention.head_count_kv"), 1);
    EXPECT_EQ(set.meta.get_int("llama.rope.dimension_count"), 4);
    EXPECT_EQ(set.meta.get_int("llama.feed_forward_length"), 12);
    EXPECT_EQ(set.meta.get_int("llama.block_count"), 2);
    ASSERT_EQ(set.tensors.size(), 3u + 2 * 9);
    // Each tensor holds exactly its region's floats of its layer, in order.
    const auto check = [&](const std::string& name, std::vector<int64_t> ne, Region r, int layer) {
      const Tensor& t = set.get(name);
      EXPECT_EQ(t.ne, ne) << name;
      std::vector<float> v(size_t(t.nelements()));
      ASSERT_EQ(t.nbytes, v.size() * 4) << name;
      std::memcpy(v.data(), t.data, t.nbytes);
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_EQ(v[i], float(r * 10000 + layer * 1000 + int(i % 1000))) << name << " [" << i << "]";
    };
    check("token_embd.weight", {8, 6}, kEmbd, 0);
    check("output_norm.weight", {8}, kRmsFinal, 0);
    check("output.weight", {8, 6}, shared ? kEmbd : kWcls, 0);
    for (int l = 0; l < 2; ++l) {
      const std::string b = cat("blk.", l, ".");
      check(b + "attn_norm.weight", {8}, kRmsAtt, l);
      check(b + "attn_q.weight", {8, 8}, kWq, l);
      check(b + "attn_k.weight", {8, 4}, kWk, l);
      check(b + "attn_v.weight", {8, 4}, kWv, l);
      check(b + "attn_output.weight", {8, 8}, kWo, l);
      check(b + "ffn_norm.weight", {8}, kRmsFfn, l);
      check(b + "ffn_gate.weight", {8, 12}, kW1, l);
      check(b + "ffn_down.weight", {12, 8}, kW2, l);
      check(b + "ffn_up.weight", {8, 12}, kW3, l);
    }
  }
}

TEST(Llama2c, WrongSizesAndHeadersAreNamedErrors) {
  const auto dir = test::scratch_dir();
  const std::string path = (dir / "bad.bin").string();
  Tiny tiny;
  tiny.shared = false;
  const auto good = tiny.bytes();
  // Every cut in and near the header, then every 7th byte (all residues mod 4) to the end.
  for (size_t len = 0; len < good.size(); len += len < 64 ? 1 : 7) {
    test::write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + long(len)));
    const std::string msg = expect_error([&] { read_llama2c(path); }, path);
    if (len >= 28) {
      EXPECT_NE(msg.find(cat("implies ", good.size())), std::string::npos) << msg;
    }
  }
  auto longer = good;
  put_f32(longer, 0.f);
  test::write_bytes(path, longer);
  expect_error([&] { read_llama2c(path); }, path);

  struct Edit {
    std::function<void(Tiny&)> edit;
    std::string needle;
  };
  const Edit edits[] = {
      {[](Tiny& t) { t.dim = 0; }, "not positive"},
      {[](Tiny& t) { t.hidden = -1; }, "not positive"},
      {[](Tiny& t) { t.layers = INT32_MIN; }, "not positive"},
      {[](Tiny& t) { t.vocab = INT32_MIN; }, "implies"},  // -INT32_MIN: a separate classifier, too big
      {[](Tiny& t) { t.heads = 3; }, "do not divide"},
      {[](Tiny& t) { t.heads = 8; }, "do not divide"},  // head size 1: odd
      {[](Tiny& t) { t.kv_heads = 4; }, "do not divide"},
      {[](Tiny& t) { t.seq = 0; }, "not positive"},
      {[](Tiny& t) {
         t.hidden = t.layers = t.vocab = t.seq = INT32_MAX;
         t.dim = INT32_MAX - 1;
         t.heads = t.kv_heads = 1;
       },
       "implies more than 2^64"},
  };
  for (const Edit& e : edits) {
    Tiny bad;
    bad.vocab = -bad.vocab;  // as the good file: separate classifier
    e.edit(bad);
    auto bytes = good;  // the header is all that changes; the body is the good file's
    std::vector<uint8_t> header;
    for (int32_t v : {bad.dim, bad.hidden, bad.layers, bad.heads, bad.kv_heads, bad.vocab, bad.seq})
      put_i32(header, v);
    std::copy(header.begin(), header.end(), bytes.begin());
    test::write_bytes(path, bytes);
    const std::string msg = expect_error([&] { read_llama2c(path); }, path);
    EXPECT_NE(msg.find(e.needle), std::string::npos) << msg;
  }
}

TEST(Llama2c, TokenizerPieces) {
  const auto dir = test::scratch_dir();
  Tiny tiny;
  test::write_bytes(dir / "m.bin", tiny.bytes());
  const std::vector<std::pair<std::string, float>> pieces = {
      {"<unk>", 0.f}, {"\n<s>\n", 0.f}, {"\n</s>\n", 0.f}, {"<0x0A>", 0.f}, {" the", -1.5f}, {"", -2.f}};
  test::write_bytes(dir / "tok6.bin", tokenizer_bytes(pieces));
  const TensorSet set = read_llama2c((dir / "m.bin").string());  // finds tok6.bin
  const Metadata& m = set.meta;
  EXPECT_EQ(m.get_str("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*m.get_strings("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"<unk>", "<s>", "</s>", "<0x0A>", "\xe2\x96\x81the", ""}));
  EXPECT_EQ(*m.get_floats("tokenizer.ggml.scores"), (std::vector<double>{0, 0, 0, 0, -1.5, -2}));
  EXPECT_EQ(*m.get_ints("tokenizer.ggml.token_type"), (std::vector<int64_t>{2, 3, 3, 6, 1, 3}));
  EXPECT_EQ(m.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(m.get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(m.get_int("tokenizer.ggml.unknown_token_id"), 0);

  // A vocabulary of another size is refused, naming the tokenizer file.
  const std::string other = (dir / "other.bin").string();
  test::write_bytes(other, tokenizer_bytes({pieces.begin(), pieces.end() - 1}));
  const std::string msg = expect_error([&] { read_llama2c((dir / "m.bin").string(), other); }, other);
  EXPECT_NE(msg.find("holds 5 tokens"), std::string::npos) << msg;
}

TEST(Llama2c, EveryTokenizerTruncationIsANamedError) {
  const auto dir = test::scratch_dir();
  Tiny tiny;
  const std::string bin = (dir / "m.bin").string();
  test::write_bytes(bin, tiny.bytes());
  const auto good =
      tokenizer_bytes({{"<unk>", 0}, {"<s>", 0}, {"</s>", 0}, {"a", -1}, {" b", -2}, {"cd", -3}});
  const std::string path = (dir / "tok.bin").string();
  test::write_bytes(path, good);
  EXPECT_EQ(read_llama2c(bin, path).meta.get_strings("tokenizer.ggml.tokens")->size(), 6u);
  const auto d = test::damage_file(path, good, 0, good.size(), [&](const std::string& p) { read_llama2c(bin, p); });
  EXPECT_EQ(d.cuts_refused, good.size());
  test::write_bytes(path, good);
  // Lengths that run past the end or are negative.
  for (int32_t len : {-1, INT32_MAX, int32_t(good.size())}) {
    auto bad = good;
    std::memcpy(bad.data() + 8, &len, 4);  // the first piece's length
    test::write_bytes(path, bad);
    const std::string msg = expect_error([&] { read_llama2c(bin, path); }, path);
    EXPECT_NE(msg.find("runs past the end"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace bonsai
