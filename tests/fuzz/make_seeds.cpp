// Writes the binary seeds of the fuzz corpus with the project's own writers and test fixtures:
//   bonsai_fuzz_make_seeds tests/fuzz/corpus
// (the other seeds — JSON, YAML, tok512.bin — are trimmed copies of shared fixtures and presets;
// tests/fuzz/corpus/README.md says where each comes from). Small on purpose: the corpus is
// replayed by ctest in every build.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "calibrate/stats.h"
#include "formats/bonsai_file.h"
#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/llama2c_fixture.h"
#include "formats/owned_tensors.h"
#include "formats/safetensors_fixture.h"
#include "support.h"

namespace {

namespace fs = std::filesystem;
using namespace bonsai;

Metadata model_meta() {
  Metadata m;
  m.set_str("general.architecture", "llama");
  m.set_u32("llama.block_count", 1);
  m.set_f32s("a.f32", {0.5f, -1.f});
  m.set_strings("tokenizer.ggml.tokens", {"<s>", "</s>", "\xE2\x96\x81the"});
  m.set("a.i64", KvValue::of(int64_t(-3)));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  auto dir = [&](const char* target) {
    fs::create_directories(out / target);
    return out / target;
  };
  try {
    ::setenv("SOURCE_DATE_EPOCH", "1700000000", 1);  // reproducible bonsai.created
    // A few tensors of different types and ranks, with deterministic bytes.
    test::OwnedTensors ts;
    auto fill = [](std::vector<uint8_t>& b) {
      for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 37 + b.size());
    };
    fill(ts.add("token_embd.weight", TypeId::F32, {8, 3}));
    fill(ts.add("blk.0.attn_q.weight", TypeId::PTQ1_0, {256, 1}));
    fill(ts.add("blk.0.ffn_up.weight", TypeId::Q8_0, {32, 2}));
    // 32 bytes, a whole alignment unit: the file ends with tensor data, not padding (a GGUF
    // whose final padding is cut off is still complete, so the damage tests could not cut there).
    fill(ts.add("output_norm.weight", TypeId::F16, {16}));
    write_gguf((dir("gguf") / "seed-model.gguf").string(), model_meta(), ts.tensors);
    write_bonsai((dir("bonsai") / "seed-model.bonsai").string(), model_meta(), ts.tensors);

    calib::Stats st;
    st.manifest_json = R"({"model":"seed"})";
    auto& a = st.by_weight["blk.0.attn_q.weight"];
    a.cols = 4;
    a.rows_seen = 3;
    a.sum_sq = {1, 2, 3, 4};
    a.gram.assign(16, 0.5);
    auto& b = st.by_weight["blk.0.ffn_up.weight"];
    b.cols = 8;  // 32 bytes: the file ends with data, not padding (see output_norm above)
    b.rows_seen = 7;
    b.sum_sq = {0.25, 8, 1, 2, 3, 4, 5, 6};
    calib::save_stats((dir("stats") / "seed-stats.gguf").string(), st);
    // The same with general.alignment 1 and the data at an odd offset: load_stats once read
    // these floats through a float pointer (a misaligned load).
    TensorSet odd = read_gguf((dir("stats") / "seed-stats.gguf").string());
    odd.meta.set_u32("general.alignment", 1);
    odd.meta.set_str("bonsai.calib.manifest", R"({"model":"seed" })");
    write_gguf((dir("stats") / "repro-unaligned.gguf").string(), odd.meta, odd.tensors);

    using test::f32_ramp;
    test::write_bytes(dir("safetensors") / "seed-model.safetensors",
                      test::make_safetensors({{"a.weight", "F32", {2, 3}, f32_ramp(6)},
                                              {"b.weight", "BF16", {4}, std::vector<uint8_t>(8, 0x3f)}},
                                             nlohmann::json{{"format", "pt"}}));

    const std::string index = test::two_shard_index();
    test::write_bytes(dir("safetensors_index") / "seed-index.json", std::vector<uint8_t>(index.begin(), index.end()));

    test::write_bytes(dir("llama2c") / "seed-tiny-shared.bin", test::llama2c_fixture::Tiny{}.bytes());
    test::llama2c_fixture::Tiny own;
    own.shared = false;
    own.layers = 1;
    test::write_bytes(dir("llama2c") / "seed-tiny-classifier.bin", own.bytes());
    test::write_bytes(dir("llama2c_tokenizer") / "seed-six-pieces.bin",
                      test::llama2c_fixture::tokenizer_bytes(
                          {{"<unk>", 0}, {"<s>", 0}, {"</s>", 0}, {"<0x0A>", 0}, {" b", -2}, {"cd", -3}}));
  } catch (const bonsai::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
