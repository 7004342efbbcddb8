#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "formats/error.h"
#include "formats/fp16.h"
#include "formats/hf_model.h"
#include "formats/safetensors.h"
#include "safetensors_fixture.h"
#include "support.h"

namespace bonsai {
namespace {

using nlohmann::json;
using test::expect_error;
using test::StTensor;

void write_json(const std::filesystem::path& p, const json& j) {
  const std::string s = j.dump(2);
  test::write_bytes(p, std::vector<uint8_t>(s.begin(), s.end()));
}

// Deterministic values in [-1, 1): enough to tell rows apart.
std::vector<float> noise(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(seed >> 8) / float(1u << 23) - 1.0f;
  }
  return v;
}

// A tiny HF model: hidden 8, 2 heads of 8 (1 kv head; head_dim 8 so that the q/k permutation is
// not its own inverse), ff 6, vocab 5, 2 layers, F32 tensors.
struct TinyModel {
  json config = {{"model_type", "llama"},  {"hidden_size", 8},         {"intermediate_size", 6},
                 {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                 {"head_dim", 8},          {"vocab_size", 5},          {"max_position_embeddings", 64},
                 {"rms_norm_eps", 1e-5},   {"rope_theta", 500.0},      {"tie_word_embeddings", true}};
  std::vector<StTensor> tensors;

  void add(const std::string& name, std::vector<int64_t> shape, uint32_t seed) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    tensors.push_back({name, "F32", shape, test::f32_bytes(noise(n, seed))});
  }
  // The standard tensor list; q/k/v biases when `bias`, q/k norms when `qk_norm`.
  TinyModel(bool bias, bool qk_norm) {
    add("model.embed_tokens.weight", {5, 8}, 1);
    add("model.norm.weight", {8}, 2);
    for (int l = 0; l < 2; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const uint32_t s = 100u * uint32_t(l + 1);
      add(p + "input_layernorm.weight", {8}, s + 1);
      add(p + "post_attention_layernorm.weight", {8}, s + 2);
      add(p + "self_attn.q_proj.weight", {16, 8}, s + 3);
      add(p + "self_attn.k_proj.weight", {8, 8}, s + 4);
      add(p + "self_attn.v_proj.weight", {8, 8}, s + 5);
      add(p + "self_attn.o_proj.weight", {8, 16}, s + 6);
      add(p + "mlp.gate_proj.weight", {6, 8}, s + 7);
      add(p + "mlp.up_proj.weight", {6, 8}, s + 8);
      add(p + "mlp.down_proj.weight", {8, 6}, s + 9);
      if (bias) {
        add(p + "self_attn.q_proj.bias", {16}, s + 10);
        add(p + "self_attn.k_proj.bias", {8}, s + 11);
        add(p + "self_attn.v_proj.bias", {8}, s + 12);
      }
      if (qk_norm) {
        add(p + "self_attn.q_norm.weight", {8}, s + 13);
        add(p + "self_attn.k_norm.weight", {8}, s + 14);
      }
    }
  }
  std::filesystem::path write(const std::string& name = "tiny") const {
    const auto dir = test::scratch_dir() / name;
    std::filesystem::create_directories(dir);
    write_json(dir / "config.json", config);
    test::write_bytes(dir / "model.safetensors", test::make_safetensors(tensors));
    return dir;
  }
  void erase(const std::string& name) {
    std::erase_if(tensors, [&](const StTensor& t) { return t.name == name; });
  }
};

// Same type, shape and bytes (the sets map the file separately, so pointers differ).
bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.type == b.type && a.ne == b.ne && a.nbytes == b.nbytes &&
         std::memcmp(a.data, b.data, a.nbytes) == 0;
}

std::vector<float> floats(const Tensor& t) {
  std::vector<float> v(size_t(t.nelements()));
  traits(t.type).to_float(t.data, v.data(), int64_t(v.size()));
  return v;
}

// y = W x + b for a ggml-shaped weight (ne [in, out]).
std::vector<double> matvec(const Tensor& w, const Tensor* b, const std::vector<double>& x) {
  const auto wf = floats(w);
  const auto bf = b ? floats(*b) : std::vector<float>();
  std::vector<double> y(size_t(w.ne[1]));
  for (size_t r = 0; r < y.size(); ++r) {
    double s = b ? bf[r] : 0.0;
    for (size_t c = 0; c < x.size(); ++c) s += double(wf[r * x.size() + c]) * x[c];
    y[r] = s;
  }
  return y;
}

// RoPE on one head at position pos: HF's rotate_half pairs (i, i + d/2); ggml's "normal" mode
// pairs (2i, 2i + 1). Same frequency theta^(-2i/d) for pair i in both.
std::vector<double> rope(std::vector<double> v, int pos, double theta, bool neox) {
  const size_t d = v.size();
  for (size_t i = 0; i < d / 2; ++i) {
    const double a = pos * std::pow(theta, -2.0 * double(i) / double(d));
    const size_t i0 = neox ? i : 2 * i, i1 = neox ? i + d / 2 : 2 * i + 1;
    const double x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * std::cos(a) - x1 * std::sin(a);
    v[i1] = x1 * std::cos(a) + x0 * std::sin(a);
  }
  return v;
}

std::vector<double> head(const std::vector<double>& v, size_t h, size_t d) {
  return {v.begin() + long(h * d), v.begin() + long((h + 1) * d)};
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(HfConfig, ReadsZhTinyQwen3) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/config.json");
  const HfConfig c = read_hf_config(test::shared_file("models/zh-tiny-qwen3/config.json").string());
  EXPECT_EQ(c.arch, "qwen3");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 768);
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_id, 151645);
}

TEST(HfConfig, DefaultsAndErrors) {
  const auto dir = test::scratch_dir();
  const std::string path = (dir / "config.json").string();
  const json base = {{"model_type", "llama"},          {"hidden_size", 64},        {"intermediate_size", 128},
                     {"num_hidden_layers", 2},         {"num_attention_heads", 4}, {"vocab_size", 100},
                     {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-5}};
  write_json(path, base);
  const HfConfig c = read_hf_config(path);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.bos_token_id.has_value());

  struct Case {
    std::function<void(json&)> edit;
    std::string needle;
  };
  const Case cases[] = {
      {[](json& j) { j.erase("hidden_size"); }, "'hidden_size' is missing"},
      {[](json& j) { j["model_type"] = "gpt2"; }, "unknown architecture 'gpt2'"},
      {[](json& j) { j.erase("model_type"); }, "'model_type' is missing"},
      {[](json& j) { j["model_type"] = 7; }, "'model_type' must be a string"},
      {[](json& j) { j["hidden_size"] = "64"; }, "'hidden_size' must be a positive integer"},
      {[](json& j) { j["num_hidden_layers"] = 0; }, "'num_hidden_layers' must be a positive integer"},
      {[](json& j) { j["vocab_size"] = 1e12; }, "'vocab_size' must be a positive integer"},
      {[](json& j) { j["num_key_value_heads"] = 3; }, "not a multiple of num_key_value_heads"},
      {[](json& j) { j["hidden_size"] = 66; }, "not a multiple of num_attention_heads"},
      {[](json& j) { j["head_dim"] = 15; }, "head_dim 15 is odd"},
      {[](json& j) { j["rms_norm_eps"] = "small"; }, "'rms_norm_eps' must be a number"},
      {[](json& j) { j.erase("rms_norm_eps"); }, "'rms_norm_eps' is missing"},
      {[](json& j) { j["tie_word_embeddings"] = 1; }, "'tie_word_embeddings' must be true or false"},
      {[](json& j) {
         j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
       },
       "rope_scaling of type 'llama3'"},
      {[](json& j) { j = json::array(); }, "must hold a JSON object"},
  };
  for (const Case& k : cases) {
    json j = base;
    k.edit(j);
    write_json(path, j);
    const std::string msg = expect_error([&] { read_hf_config(path); }, path);
    EXPECT_NE(msg.find(k.needle), std::string::npos) << msg;
  }
  // Explicit values win over defaults; a null head_dim is absent; an eos list gives its first id.
  json j = base;
  j["num_key_value_heads"] = 2;
  j["head_dim"] = nullptr;
  j["rope_theta"] = 5e5;
  j["eos_token_id"] = {128001, 128009};
  j["rope_scaling"] = nullptr;
  write_json(path, j);
  const HfConfig e = read_hf_config(path);
  EXPECT_EQ(e.num_kv_heads, 2);
  EXPECT_EQ(e.head_dim, 16);
  EXPECT_EQ(e.rope_theta, 5e5);
  EXPECT_EQ(e.eos_token_id, 128001);
  expect_error([&] { read_hf_config((dir / "absent.json").string()); }, "absent.json");
}

TEST(HfModel, ZhTinyQwen3AsLlamaCppNamesIt) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/model.safetensors");
  const std::string dir = test::shared_file("models/zh-tiny-qwen3").string();
  const TensorSet set = open_hf_model(dir);
  const TensorSet st = read_safetensors(dir + "/model.safetensors");
  EXPECT_EQ(set.format, "hf");
  EXPECT_EQ(set.arch(), "qwen3");
  ASSERT_EQ(set.tensors.size(), 68u);  // tied: no output.weight
  EXPECT_EQ(set.find("output.weight"), nullptr);
  EXPECT_EQ(set.tensors.front().name, "token_embd.weight");
  EXPECT_EQ(set.tensors.back().name, "output_norm.weight");

  const std::pair<const char*, const char*> names[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
      {"blk.5.ffn_norm.weight", "model.layers.5.post_attention_layernorm.weight"},
      {"blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight"},
      {"blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight"},
      {"blk.2.attn_v.weight", "model.layers.2.self_attn.v_proj.weight"},
      {"blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"},
      {"blk.4.attn_q_norm.weight", "model.layers.4.self_attn.q_norm.weight"},
      {"blk.4.attn_k_norm.weight", "model.layers.4.self_attn.k_norm.weight"},
      {"blk.5.ffn_gate.weight", "model.layers.5.mlp.gate_proj.weight"},
      {"blk.5.ffn_up.weight", "model.layers.5.mlp.up_proj.weight"},
      {"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"},
  };
  for (const auto& [gg, hf] : names) {
    const Tensor& a = set.get(gg);
    const Tensor& b = st.get(hf);
    EXPECT_EQ(a.ne, b.ne) << gg;
    if (a.ne.size() == 2) {
      // qwen3 keeps HF's NeoX row order: 2-D weights are the file's bytes, untouched.
      EXPECT_EQ(a.type, TypeId::BF16) << gg;
      EXPECT_TRUE(same_bytes(a, b)) << gg;
    } else {
      // Norms become F32 as in a llama.cpp conversion, with the same values.
      EXPECT_EQ(a.type, TypeId::F32) << gg;
      EXPECT_EQ(floats(a), floats(b)) << gg;
    }
  }
  for (int l = 0; l < 6; ++l) EXPECT_NE(set.find(cat("blk.", l, ".attn_k_norm.weight")), nullptr);

  const Metadata& m = set.meta;
  EXPECT_EQ(m.get_str("general.name"), "zh-tiny-qwen3");
  EXPECT_EQ(m.get_int("qwen3.block_count"), 6);
  EXPECT_EQ(m.get_int("qwen3.context_length"), 2048);
  EXPECT_EQ(m.get_int("qwen3.embedding_length"), 256);
  EXPECT_EQ(m.get_int("qwen3.feed_forward_length"), 768);
  EXPECT_EQ(m.get_int("qwen3.attention.head_count"), 4);
  EXPECT_EQ(m.get_int("qwen3.attention.head_count_kv"), 2);
  EXPECT_EQ(m.get_int("qwen3.attention.key_length"), 64);
  EXPECT_EQ(m.get_int("qwen3.attention.value_length"), 64);
  EXPECT_EQ(m.find("qwen3.block_count")->type, KvType::U32);
  EXPECT_EQ(m.find("qwen3.rope.freq_base")->type, KvType::F32);
  EXPECT_EQ(m.get_float("qwen3.rope.freq_base"), 1e6);
  EXPECT_EQ(m.get_float("qwen3.attention.layer_norm_rms_epsilon"), double(1e-6f));
  EXPECT_EQ(m.get_int("general.file_type"), 32);  // BF16
  EXPECT_EQ(m.get_str("tokenizer.ggml.model"), "gpt2");
}

TEST(HfModel, LlamaQkPermutationGivesTheSameAttentionScores) {
  TinyModel tiny(/*bias=*/true, /*qk_norm=*/false);
  const auto dir = tiny.write();
  const TensorSet set = open_hf_model(dir.string());
  const TensorSet st = read_safetensors((dir / "model.safetensors").string());
  EXPECT_EQ(set.meta.get_int("llama.rope.dimension_count"), 8);
  EXPECT_EQ(set.meta.get_int("llama.vocab_size"), 5);
  EXPECT_FALSE(set.meta.has("tokenizer.ggml.model"));  // no tokenizer.json here
  const double theta = 500.0;
  const auto x = [] {
    const auto n = noise(8, 77);
    return std::vector<double>(n.begin(), n.end());
  }();
  for (int l = 0; l < 2; ++l) {
    const std::string hp = cat("model.layers.", l, ".self_attn."), gp = cat("blk.", l, ".");
    const auto q_hf = matvec(st.get(hp + "q_proj.weight"), &st.get(hp + "q_proj.bias"), x);
    const auto k_hf = matvec(st.get(hp + "k_proj.weight"), &st.get(hp + "k_proj.bias"), x);
    const auto q_gg = matvec(set.get(gp + "attn_q.weight"), &set.get(gp + "attn_q.bias"), x);
    const auto k_gg = matvec(set.get(gp + "attn_k.weight"), &set.get(gp + "attn_k.bias"), x);
    EXPECT_NE(q_hf, q_gg);  // the rows did move
    for (size_t h = 0; h < 2; ++h)
      for (int pq : {0, 3, 17})
        for (int pk : {0, 2, 17}) {
          const double want =
              dot(rope(head(q_hf, h, 8), pq, theta, true), rope(head(k_hf, 0, 8), pk, theta, true));
          const double got =
              dot(rope(head(q_gg, h, 8), pq, theta, false), rope(head(k_gg, 0, 8), pk, theta, false));
          EXPECT_NEAR(got, want, 1e-9 * (1 + std::fabs(want))) << "layer " << l << " head " << h;
        }
    // v and the output projection are not rotated: untouched.
    EXPECT_TRUE(same_bytes(set.get(gp + "attn_v.weight"), st.get(hp + "v_proj.weight")));
    EXPECT_TRUE(same_bytes(set.get(gp + "attn_output.weight"), st.get(hp + "o_proj.weight")));
  }
}

TEST(HfModel, Qwen2KeepsRowOrderAndNeedsBiases) {
  TinyModel tiny(/*bias=*/true, /*qk_norm=*/false);
  tiny.config["model_type"] = "qwen2";
  const auto dir = tiny.write();
  const TensorSet set = open_hf_model(dir.string());
  const TensorSet st = read_safetensors((dir / "model.safetensors").string());
  EXPECT_EQ(set.tensors.size(), 2u + 2 * 12);
  EXPECT_TRUE(same_bytes(set.get("blk.1.attn_q.weight"), st.get("model.layers.1.self_attn.q_proj.weight")));
  EXPECT_TRUE(same_bytes(set.get("blk.1.attn_k.bias"), st.get("model.layers.1.self_attn.k_proj.bias")));
  EXPECT_FALSE(set.meta.has("qwen2.rope.dimension_count"));
  EXPECT_EQ(set.meta.get_int("general.file_type"), 0);

  tiny.erase("model.layers.1.self_attn.v_proj.bias");
  const auto dir2 = tiny.write("nobias");
  const std::string msg = expect_error([&] { open_hf_model(dir2.string()); }, dir2.string());
  EXPECT_NE(msg.find("'model.layers.1.self_attn.v_proj.bias' is missing"), std::string::npos) << msg;
}

TEST(HfModel, DominantDtypeAndNormsToF32) {
  TinyModel tiny(/*bias=*/false, /*qk_norm=*/true);
  tiny.config["model_type"] = "qwen3";
  tiny.config["tie_word_embeddings"] = false;
  tiny.add("lm_head.weight", {5, 8}, 9);
  // Every tensor to F16 but one small matrix left F32: the file type follows the majority.
  for (StTensor& t : tiny.tensors) {
    if (t.name == "model.layers.0.mlp.up_proj.weight") continue;
    std::vector<float> v(t.bytes.size() / 4);
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    t.bytes.clear();
    for (float f : v) {
      const uint16_t h = f32_to_fp16(f);
      t.bytes.push_back(uint8_t(h));
      t.bytes.push_back(uint8_t(h >> 8));
    }
    t.dtype = "F16";
  }
  const auto dir = tiny.write();
  const TensorSet set = open_hf_model(dir.string());
  const TensorSet st = read_safetensors((dir / "model.safetensors").string());
  EXPECT_EQ(set.meta.get_int("general.file_type"), 1);
  EXPECT_TRUE(same_bytes(set.get("output.weight"), st.get("lm_head.weight")));
  EXPECT_EQ(set.tensors.back().name, "output.weight");
  const Tensor& qn = set.get("blk.1.attn_q_norm.weight");
  EXPECT_EQ(qn.type, TypeId::F32);
  EXPECT_EQ(qn.nbytes, 32u);
  EXPECT_EQ(floats(qn), floats(st.get("model.layers.1.self_attn.q_norm.weight")));
  EXPECT_EQ(set.get("blk.0.ffn_up.weight").type, TypeId::F32);
}

TEST(HfModel, StructuralErrorsNameTheTensor) {
  struct Case {
    std::function<void(TinyModel&)> edit;
    std::string needle;
  };
  const Case cases[] = {
      {[](TinyModel& t) { t.add("model.layers.0.mlp.extra.weight", {2}, 5); },
       "tensor 'model.layers.0.mlp.extra.weight' is not part of a llama model"},
      {[](TinyModel& t) {
         t.add("model.layers.2.mlp.up_proj.weight", {6, 8}, 5);
       },
       "is in layer 2"},
      {[](TinyModel& t) { t.add("model.layers.0.self_attn.q_norm.weight", {8}, 5); },
       "'model.layers.0.self_attn.q_norm.weight' is not part of a llama model"},
      {[](TinyModel& t) { t.erase("model.layers.1.mlp.down_proj.weight"); },
       "'model.layers.1.mlp.down_proj.weight' is missing"},
      {[](TinyModel& t) { t.erase("model.embed_tokens.weight"); }, "'model.embed_tokens.weight' is missing"},
      {[](TinyModel& t) { t.config["tie_word_embeddings"] = false; }, "lm_head.weight is missing"},
      {[](TinyModel& t) { t.config["intermediate_size"] = 7; },
       "'model.layers.0.mlp.gate_proj.weight' has shape [8, 6], config.json implies [8, 7]"},
      {[](TinyModel& t) { t.config["vocab_size"] = 6; }, "'model.embed_tokens.weight' has shape [8, 5]"},
  };
  for (const Case& c : cases) {
    TinyModel tiny(true, false);
    c.edit(tiny);
    const auto dir = tiny.write();
    const std::string msg = expect_error([&] { open_hf_model(dir.string()); }, dir.string());
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
  }
  // Accepted extras: rotary buffers are skipped, a stored lm_head of a tied model is dropped.
  TinyModel tiny(true, false);
  tiny.add("model.layers.0.self_attn.rotary_emb.inv_freq", {2}, 5);
  tiny.add("lm_head.weight", {5, 8}, 6);
  const TensorSet set = open_hf_model(tiny.write().string());
  EXPECT_EQ(set.tensors.size(), 2u + 2 * 12);
  EXPECT_EQ(set.find("output.weight"), nullptr);

  const auto empty = test::scratch_dir();
  expect_error([&] { open_hf_model(empty.string()); }, "config.json");
  write_json(empty / "config.json", tiny.config);
  const std::string msg = expect_error([&] { open_hf_model(empty.string()); }, empty.string());
  EXPECT_NE(msg.find("neither model.safetensors"), std::string::npos) << msg;
  expect_error([&] { open_hf_model((empty / "config.json").string()); }, "not a folder");
}

TEST(HfModel, ShardedFolder) {
  TinyModel tiny(true, false);
  const auto dir = test::scratch_dir() / "sharded";
  std::filesystem::create_directories(dir);
  write_json(dir / "config.json", tiny.config);
  const size_t half = tiny.tensors.size() / 2;
  const std::vector<StTensor> a(tiny.tensors.begin(), tiny.tensors.begin() + long(half)),
      b(tiny.tensors.begin() + long(half), tiny.tensors.end());
  json wm = json::object();
  for (const auto& t : a) wm[t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) wm[t.name] = "model-00002-of-00002.safetensors";
  test::write_bytes(dir / "model-00001-of-00002.safetensors", test::make_safetensors(a));
  test::write_bytes(dir / "model-00002-of-00002.safetensors", test::make_safetensors(b));
  write_json(dir / "model.safetensors.index.json", {{"weight_map", wm}});
  const TensorSet set = open_hf_model(dir.string());
  EXPECT_EQ(set.tensors.size(), 2u + 2 * 12);
  EXPECT_EQ(set.meta.get_str("general.name"), "sharded");
}

}  // namespace
}  // namespace bonsai
