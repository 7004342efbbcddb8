// bonsai synth: the presets' shapes (the published Qwen3 models), --config (a Hugging Face
// config.json) against them and against a real model, the streamed output against the bytes of
// the in-memory writer it replaced, the free-space refusal, and the residual option: the block
// weights of a PQ2_0 model get random residual codebooks that the runtime loads (formats' view
// validates them) and bench counts; wrong options are refused before anything is written.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <tuple>

#include "formats/error.h"
#include "formats/hf_model.h"
#include "formats/model_file.h"
#include "runtime/bench.h"
#include "runtime/load.h"
#include "runtime/synth.h"
#include "support.h"

using namespace bonsai;

namespace {

SynthOptions tiny_pq2(int64_t rc_rows) {
  SynthOptions o;
  o.size = "tiny";
  o.type = TypeId::PQ2_0;
  o.residual = true;
  o.rc_rows = rc_rows;
  return o;
}

uint64_t file_xxh3(const std::string& p) {
  const auto b = test::read_bytes(p);
  return XXH3_64bits(b.data(), b.size());
}

std::string synth_error(const SynthOptions& o, const std::string& out) {
  try {
    synth_model(o, out);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SynthResidual, EveryBlockWeightCarriesItsCodebooksAndBenchCountsThem) {
  const std::string out = (test::scratch_dir() / "synth-rc.gguf").string();
  synth_model(tiny_pq2(64), out);
  const auto m = load_model(out);
  EXPECT_EQ(m->file.meta.get_str("bonsai.residual.scheme"), std::optional<std::string>("kmeans"));
  ASSERT_EQ(m->residuals.size(), size_t(m->cfg.n_layer) * 7);
  // The bytes a token reads, from the shapes alone: base weights, head, one embedding row, and
  // per block weight rows/64 codebooks of 16 fp16 centroids of 8 plus 4-bit indices per 8 inputs.
  uint64_t want = m->output->nbytes + m->token_embd->nbytes / uint64_t(m->cfg.n_vocab);
  std::set<uint32_t> seen;
  for (const LayerWeights& l : m->layers)
    for (const Tensor* t : {l.wq, l.wk, l.wv, l.wo, l.gate, l.up, l.down}) {
      ASSERT_EQ(t->type, TypeId::PQ2_0);
      const int64_t cols = t->ne[0], rows = t->ne[1];
      want += t->nbytes + uint64_t(rows / 64) * 16 * 8 * 2 + uint64_t(rows) * uint64_t(cols / 8 * 4 / 8);
      const ResidualView& v = m->residuals.at(t);
      EXPECT_EQ(v.scheme, ResidualScheme::kmeans);
      EXPECT_EQ(v.dim, 8);
      EXPECT_EQ(v.size, 16);
      EXPECT_EQ(v.books, rows / 64);
      for (int64_t p = 0; p < cols / 8; ++p) seen.insert(v.index(rows - 1, p));
    }
  EXPECT_EQ(weight_bytes_per_token(*m), want);
  EXPECT_EQ(seen.size(), 16u) << "random indices should reach every centroid";
}

TEST(SynthResidual, RefusesOtherTypesAndShapesItCannotStore) {
  const auto out = test::scratch_dir() / "synth-bad.gguf";
  SynthOptions o = tiny_pq2(0);
  o.type = TypeId::PTQ1_0;
  EXPECT_NE(synth_error(o, out.string()).find("--residual needs --type pq2_0"), std::string::npos);
  o = tiny_pq2(7);
  EXPECT_NE(synth_error(o, out.string()).find("--rc-rows 7 does not divide"), std::string::npos);
  o = tiny_pq2(0);
  o.rc_dim = 3;
  EXPECT_NE(synth_error(o, out.string()).find("--rc-dim 3 does not divide the group of 128"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(out));
}

// The bytes synth wrote when it held the whole model in memory and wrote it with write_model
// (checksums taken at c7d28ac): streaming it tensor by tensor changes none of them.
TEST(SynthOutput, TinyFilesAreThoseOfTheInMemoryWriter) {
  const auto dir = test::scratch_dir();
  SynthOptions o;
  o.size = "tiny";
  synth_model(o, (dir / "ptq1.gguf").string());
  EXPECT_EQ(file_xxh3((dir / "ptq1.gguf").string()), 0xc49312f41267abf3ull);
  synth_model(tiny_pq2(64), (dir / "pq2-rc.gguf").string());
  EXPECT_EQ(file_xxh3((dir / "pq2-rc.gguf").string()), 0xc97ffc6ae35c61ceull);
  o.type = TypeId::BF16;
  o.embd_type = TypeId::BF16;
  o.seed = 3;
  synth_model(o, (dir / "bf16.gguf").string());
  EXPECT_EQ(file_xxh3((dir / "bf16.gguf").string()), 0xa6a6fd76c08e732cull);
}

namespace {

namespace fs = std::filesystem;

std::vector<std::string> folder(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// The fields of a configuration that shape or run the model, for comparing two.
std::string describe(const ModelConfig& c, bool tied) {
  return cat(c.arch, " vocab ", c.n_vocab, " embd ", c.n_embd, " layers ", c.n_layer, " heads ", c.n_head, "/",
             c.n_head_kv, " head_dim ", c.head_dim, " rot ", c.n_rot, " ff ", c.n_ff, " ctx ", c.n_ctx_train, " eps ",
             c.rms_eps, " rope ", c.rope_base, " neox ", c.rope_neox, " qk_norm ", c.qk_norm, " bias ", c.qkv_bias,
             " tied ", tied);
}

int64_t elements(const std::vector<TensorSpec>& specs) {
  int64_t n = 0;
  for (const auto& s : specs) {
    int64_t e = 1;
    for (int64_t d : s.ne) e *= d;
    n += e;
  }
  return n;
}

const TensorSpec& spec(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (const auto& s : specs)
    if (s.name == name) return s;
  throw std::runtime_error("no tensor " + name);
}

// config.json of Qwen/Qwen3-14B and Qwen/Qwen3-32B as published (the fields they have).
std::string qwen3_config(int64_t layers, int64_t heads, int64_t ff) {
  return cat(R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
  "initializer_range": 0.02, "intermediate_size": )", ff, R"(, "max_position_embeddings": 40960,
  "max_window_layers": )", layers, R"(, "model_type": "qwen3", "num_attention_heads": )", heads,
             R"(, "num_hidden_layers": )", layers, R"(, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})");
}

std::string write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace

// Qwen3-14B: 40 layers of 40 query heads and 8 KV heads of 128 over 5120, FFN 17408, untied head
// (14.8B parameters); Qwen3-32B: 64 layers of 64 query heads (q is 8192 wide, more than the
// 5120 of the residual stream) and 8 KV heads, FFN 25600, untied (32.8B).
TEST(SynthPresets, Qwen3_14bAnd32bHaveThePublishedShapes) {
  bool tied = true;
  const ModelConfig c14 = synth_config("qwen3", "14b", &tied);
  EXPECT_FALSE(tied);
  const auto t14 = architecture_tensors(c14, tied);
  EXPECT_EQ(t14.size(), 1u + 40 * 11 + 2);
  EXPECT_EQ(elements(t14), 14768307200);
  EXPECT_EQ(spec(t14, "token_embd.weight").ne, (std::vector<int64_t>{5120, 151936}));
  EXPECT_EQ(spec(t14, "output.weight").ne, (std::vector<int64_t>{5120, 151936}));
  EXPECT_EQ(spec(t14, "blk.39.attn_q.weight").ne, (std::vector<int64_t>{5120, 5120}));
  EXPECT_EQ(spec(t14, "blk.39.attn_k.weight").ne, (std::vector<int64_t>{5120, 1024}));
  EXPECT_EQ(spec(t14, "blk.39.attn_v.weight").ne, (std::vector<int64_t>{5120, 1024}));
  EXPECT_EQ(spec(t14, "blk.39.attn_q_norm.weight").ne, (std::vector<int64_t>{128}));
  EXPECT_EQ(spec(t14, "blk.39.attn_output.weight").ne, (std::vector<int64_t>{5120, 5120}));
  EXPECT_EQ(spec(t14, "blk.39.ffn_gate.weight").ne, (std::vector<int64_t>{5120, 17408}));
  EXPECT_EQ(spec(t14, "blk.39.ffn_down.weight").ne, (std::vector<int64_t>{17408, 5120}));

  tied = true;
  const ModelConfig c32 = synth_config("qwen3", "32b", &tied);
  EXPECT_FALSE(tied);
  const auto t32 = architecture_tensors(c32, tied);
  EXPECT_EQ(t32.size(), 1u + 64 * 11 + 2);
  EXPECT_EQ(elements(t32), 32762123264);
  EXPECT_EQ(spec(t32, "blk.63.attn_q.weight").ne, (std::vector<int64_t>{5120, 8192}));
  EXPECT_EQ(spec(t32, "blk.63.attn_k.weight").ne, (std::vector<int64_t>{5120, 1024}));
  EXPECT_EQ(spec(t32, "blk.63.attn_output.weight").ne, (std::vector<int64_t>{8192, 5120}));
  EXPECT_EQ(spec(t32, "blk.63.ffn_up.weight").ne, (std::vector<int64_t>{5120, 25600}));
  EXPECT_EQ(spec(t32, "blk.63.ffn_down.weight").ne, (std::vector<int64_t>{25600, 5120}));
  EXPECT_EQ(spec(t32, "output.weight").ne, (std::vector<int64_t>{5120, 151936}));
  for (const ModelConfig* c : {&c14, &c32}) {
    EXPECT_EQ(c->n_ctx_train, 40960);
    EXPECT_EQ(c->rope_base, 1e6f);
    EXPECT_TRUE(c->qk_norm && c->rope_neox && !c->qkv_bias);
  }
  const auto sizes = synth_sizes("qwen3");
  EXPECT_EQ(sizes, (std::vector<std::string>{"tiny", "0.6b", "1.7b", "4b", "8b", "14b", "32b"}));
}

// The published config.json of each large model gives exactly its preset.
TEST(SynthConfig, PublishedConfigJsonEqualsThePreset) {
  const auto dir = test::scratch_dir();
  for (const auto& [size, text] : {std::pair<std::string, std::string>{"14b", qwen3_config(40, 40, 17408)},
                                   std::pair<std::string, std::string>{"32b", qwen3_config(64, 64, 25600)}}) {
    SynthOptions o;
    o.config = write_text(dir / ("config-" + size + ".json"), text);
    bool tied_cfg = true, tied_preset = true;
    const ModelConfig from_cfg = synth_config(o, &tied_cfg);
    const ModelConfig preset = synth_config("qwen3", size, &tied_preset);
    EXPECT_EQ(describe(from_cfg, tied_cfg), describe(preset, tied_preset)) << size;
  }
  // A model folder stands for its config.json.
  fs::create_directories(dir / "Qwen3-14B");
  SynthOptions o;
  o.config = write_text(dir / "Qwen3-14B" / "config.json", qwen3_config(40, 40, 17408));
  bool tied_file = true, tied_folder = true;
  const ModelConfig by_file = synth_config(o, &tied_file);
  o.config = (dir / "Qwen3-14B").string();
  const ModelConfig by_folder = synth_config(o, &tied_folder);
  EXPECT_EQ(describe(by_folder, tied_folder), describe(by_file, tied_file));
}

// The same shapes by --size or --config give the same file but for general.name.
TEST(SynthConfig, TinyFromItsConfigJsonIsTheTinyPresetsFile) {
  const auto dir = test::scratch_dir();
  SynthOptions o;
  o.size = "tiny";
  synth_model(o, (dir / "preset.gguf").string());
  o.config = write_text(dir / "config.json", R"({"model_type": "qwen3", "hidden_size": 256, "intermediate_size": 768,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
    "tie_word_embeddings": true})");
  synth_model(o, (dir / "config.gguf").string());
  const TensorSet a = open_model((dir / "preset.gguf").string()), b = open_model((dir / "config.gguf").string());
  EXPECT_EQ(b.meta.get_str("general.name"), std::optional<std::string>("synthetic qwen3 from " + o.config + " (random weights)"));
  ASSERT_EQ(a.meta.items().size(), b.meta.items().size());
  for (size_t i = 0; i < a.meta.items().size(); ++i) {
    EXPECT_EQ(a.meta.items()[i].first, b.meta.items()[i].first);
    if (a.meta.items()[i].first != "general.name") {
      EXPECT_TRUE(a.meta.items()[i].second == b.meta.items()[i].second) << a.meta.items()[i].first;
    }
  }
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    ASSERT_EQ(a.tensors[i].nbytes, b.tensors[i].nbytes);
    EXPECT_EQ(std::memcmp(a.tensors[i].data, b.tensors[i].data, a.tensors[i].nbytes), 0) << a.tensors[i].name;
  }
}

// A real model's config.json gives the tensors of that model: names, shapes and (in BF16, its
// dtype) types of the checkpoint as the Hugging Face reader maps it, and the runtime loads it.
TEST(SynthConfig, ARealModelsConfigGivesItsTensors) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/config.json");
  const auto dir = test::shared_file("models/zh-tiny-qwen3");
  SynthOptions o;
  o.config = (dir / "config.json").string();
  o.type = o.embd_type = TypeId::BF16;
  const std::string out = (test::scratch_dir() / "zh.gguf").string();
  synth_model(o, out);
  const TensorSet real = open_hf_model(dir.string());
  const auto m = load_model(out);
  ASSERT_EQ(m->file.tensors.size(), real.tensors.size());
  for (const Tensor& t : real.tensors) {
    const Tensor* s = m->file.find(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(s->ne, t.ne) << t.name;
    EXPECT_EQ(s->type, t.type) << t.name;
  }
  EXPECT_EQ(m->cfg.n_ctx_train, 2048);
}

// Too little free space is found before anything is made: the output's folder is left as it
// was (an older file under the name untouched), and exactly enough is enough.
TEST(SynthSpace, AFileThatDoesNotFitIsRefusedBeforeAnythingIsCreated) {
  const auto dir = test::scratch_dir();
  const std::string out = (dir / "tiny.gguf").string();
  SynthOptions o;
  o.size = "tiny";
  SynthPlan plan;
  SynthHooks h;
  h.plan = [&](const SynthPlan& p) { plan = p; };
  uint64_t free_bytes = 0;
  h.available = [&](const std::string& path) {
    EXPECT_EQ(path, out);
    EXPECT_EQ(folder(dir), std::vector<std::string>{"tiny.gguf"}) << "created before the space was checked";
    return free_bytes;
  };
  test::write_bytes(out, {1, 2, 3});
  std::string msg = test::error_of([&] { synth_model(o, out, h); });
  ASSERT_EQ(plan.file_bytes, 41678912u);  // the size of the file synth wrote before it streamed
  EXPECT_EQ(plan.available_bytes, 0u);
  EXPECT_NE(msg.find(out), std::string::npos) << msg;
  EXPECT_NE(msg.find(cat("needs ", plan.file_bytes, " bytes")), std::string::npos) << msg;
  free_bytes = plan.file_bytes - 1;
  msg = test::error_of([&] { synth_model(o, out, h); });
  EXPECT_NE(msg.find(cat("has ", plan.file_bytes - 1, " bytes")), std::string::npos) << msg;
  EXPECT_EQ(folder(dir), std::vector<std::string>{"tiny.gguf"});
  EXPECT_EQ(test::read_bytes(out), (std::vector<uint8_t>{1, 2, 3}));
  free_bytes = plan.file_bytes;
  synth_model(o, out, h);
  EXPECT_EQ(fs::file_size(out), plan.file_bytes);
}

// The large presets are planned without writing a byte: their size (14B BF16 is 29.5 GB, 32B
// 65.5 GB) against memory that stays one chunk, whatever the model.
TEST(SynthSpace, LargeModelsArePlannedAndRefusedWithoutWriting) {
  const auto dir = test::scratch_dir();
  for (const auto& [size, elems, layers] :
       {std::tuple<std::string, uint64_t, uint64_t>{"14b", 14768307200, 40}, {"32b", 32762123264, 64}}) {
    SynthOptions o;
    o.size = size;
    o.type = o.embd_type = o.output_type = TypeId::BF16;
    SynthPlan plan;
    SynthHooks h;
    h.plan = [&](const SynthPlan& p) { plan = p; };
    h.available = [](const std::string&) { return uint64_t(1) << 30; };
    const std::string out = (dir / (size + ".gguf")).string();
    const std::string msg = test::error_of([&] { synth_model(o, out, h); });
    EXPECT_NE(msg.find(out), std::string::npos) << msg;
    // Two bytes a weight, four a norm (F32): two per layer of 5120 and two of 128, the output's.
    const uint64_t norms = layers * (2 * 5120 + 2 * 128) + 5120;
    EXPECT_EQ(plan.data_bytes, 2 * elems + 2 * norms) << size;
    EXPECT_GT(plan.file_bytes, plan.data_bytes);
    EXPECT_LT(plan.file_bytes, plan.data_bytes + (uint64_t(1) << 20));
    EXPECT_LT(plan.memory_bytes, uint64_t(64) << 20) << size;
  }
  EXPECT_TRUE(folder(dir).empty());
}
