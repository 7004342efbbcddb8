// Every reader of untrusted input in formats/ against damaged copies of a small good file (the
// fuzz seeds of tests/fuzz/corpus/): every single-bit flip in the header and every cut length
// gives a bonsai::Error naming the file, or (a flip in a value) a file that still reads. The
// helper is test::damage_file; quantize (plans) and calibrate (statistics) have the same test.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "formats/bonsai_file.h"
#include "formats/bonsai_layout.h"
#include "formats/gguf.h"
#include "formats/hf_model.h"
#include "formats/llama2c.h"
#include "formats/llama2c_fixture.h"
#include "formats/safetensors.h"
#include "formats/safetensors_fixture.h"
#include "support.h"

namespace bonsai {
namespace {

namespace fs = std::filesystem;
using test::damage_file;
using test::fuzz_seed;

// What a successful read hands on must be readable and of the size its shape says.
void touch(const TensorSet& ts) {
  volatile uint8_t sink = 0;
  for (const Tensor& t : ts.tensors) {
    ASSERT_EQ(tensor_bytes(t.type, t.ne), t.nbytes) << t.name;
    for (uint64_t i = 0; i < t.nbytes; ++i) sink = sink + t.data[i];
  }
}

// Bytes up to and including the last '}': a JSON file cut anywhere before it is incomplete.
size_t json_end(const std::vector<uint8_t>& b) {
  for (size_t i = b.size(); i-- > 0;)
    if (b[i] == '}') return i + 1;
  return 0;
}

// Flips refused by a checked header: most of them must be (a reader that accepted nearly every
// flip would not be reading its header).
void expect_mostly_refused(const test::Damage& d, double share) {
  EXPECT_GT(d.flips, 0u);
  EXPECT_GE(double(d.flips_refused), share * double(d.flips)) << d.flips_refused << " of " << d.flips;
}

TEST(MalformedInput, Gguf) {
  const auto good = fuzz_seed("gguf", "seed-model.gguf");
  const auto d = damage_file(test::scratch_dir() / "m.gguf", good, good.size(), good.size(),
                             [](const std::string& p) { touch(read_gguf(p)); });
  expect_mostly_refused(d, 0.25);  // the tensor data (a third of the file) reads whatever it holds
}

TEST(MalformedInput, Safetensors) {
  const auto good = fuzz_seed("safetensors", "seed-model.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | good[size_t(i)];
  const auto d = damage_file(test::scratch_dir() / "m.safetensors", good, 8 + n, good.size(),
                             [](const std::string& p) { touch(read_safetensors(p)); });
  expect_mostly_refused(d, 0.25);  // JSON letters and digits: many flips still parse
}

TEST(MalformedInput, SafetensorsIndex) {
  const auto dir = test::scratch_dir();
  for (const auto& [name, bytes] : test::two_shards()) test::write_bytes(dir / name, bytes);
  const auto good = fuzz_seed("safetensors_index", "seed-index.json");
  const fs::path index = dir / "model.safetensors.index.json";
  // A damaged shard name points to a file that is not there: the error names the index too.
  const auto d = damage_file(index, good, good.size(), json_end(good),
                             [](const std::string& p) { touch(read_safetensors(p)); });
  expect_mostly_refused(d, 0.25);
}

TEST(MalformedInput, HfConfig) {
  for (const char* seed : {"seed-qwen3.json", "seed-llama.json"}) {
    SCOPED_TRACE(seed);
    const auto good = fuzz_seed("hf_config", seed);
    const auto d = damage_file(test::scratch_dir() / "config.json", good, good.size(), json_end(good),
                               [](const std::string& p) { (void)read_hf_config(p); });
    expect_mostly_refused(d, 0.1);  // most of a config is names of keys nobody reads
  }
}

// tokenizer.json, and tokenizer_config.json beside a good tokenizer.json. The seed holds both,
// split at a NUL byte (the fuzz target's input layout).
TEST(MalformedInput, HfTokenizer) {
  const auto both = fuzz_seed("hf_tokenizer", "seed-qwen3-tiny.json");
  const auto nul = std::find(both.begin(), both.end(), uint8_t(0));
  ASSERT_NE(nul, both.end());
  const std::vector<uint8_t> tok(both.begin(), nul), cfg(nul + 1, both.end());
  auto read = [](const std::string& p) {
    Metadata meta;
    add_hf_tokenizer(p, 0, meta);
  };
  {
    const auto dir = test::scratch_dir();
    const auto d = damage_file(dir / "tokenizer.json", tok, tok.size(), json_end(tok), read);
    expect_mostly_refused(d, 0.1);
  }
  {
    const auto dir = test::scratch_dir();
    test::write_bytes(dir / "tokenizer.json", tok);
    const fs::path cfg_path = dir / "tokenizer_config.json";
    const auto d = damage_file(cfg_path, cfg, cfg.size(), json_end(cfg), [&](const std::string& p) {
      EXPECT_EQ(p, cfg_path.string());
      read((dir / "tokenizer.json").string());
    });
    expect_mostly_refused(d, 0.05);
  }
}

TEST(MalformedInput, Llama2cCheckpoint) {
  for (const char* seed : {"seed-tiny-shared.bin", "seed-tiny-classifier.bin"}) {
    SCOPED_TRACE(seed);
    const auto good = fuzz_seed("llama2c", seed);
    // The header is 7 int32; every size is implied by it, so every cut is refused.
    const auto d = damage_file(test::scratch_dir() / "model.bin", good, 7 * 4, good.size(),
                               [](const std::string& p) { touch(read_llama2c(p)); });
    expect_mostly_refused(d, 0.5);
  }
}

TEST(MalformedInput, Llama2cTokenizer) {
  const auto good = fuzz_seed("llama2c_tokenizer", "seed-six-pieces.bin");
  // The file stores no token count: cut between two entries it is a shorter vocabulary (which
  // read_llama2c then refuses for not matching the checkpoint). Cut anywhere else it is refused.
  const auto d = damage_file(
      test::scratch_dir() / "tok.bin", good, good.size(), good.size(),
      [](const std::string& p) {
        Metadata meta;
        add_llama2c_tokenizer(p, meta);
      },
      /*cuts_may_parse=*/true);
  EXPECT_EQ(d.cuts - d.cuts_refused, 3u);  // after entries 3, 4 and 5 (three are the minimum)
  expect_mostly_refused(d, 0.1);           // scores and piece letters read as they are
}

TEST(MalformedInput, Bonsai) {
  const auto good = fuzz_seed("bonsai", "seed-model.bonsai");
  // Everything before the data is checksummed: every flip there is refused.
  const uint64_t data_offset = test::bonsai_layout::rd64(good, 72);
  const auto d = damage_file(test::scratch_dir() / "m.bonsai", good, data_offset, good.size(),
                             [](const std::string& p) { touch(read_bonsai(p)); });
  EXPECT_EQ(d.flips_refused, d.flips);
}

}  // namespace
}  // namespace bonsai
