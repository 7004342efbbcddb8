#include "runtime/model.h"

#include "formats/error.h"
#include "formats/hf_model.h"
#include "formats/model_file.h"

namespace bonsai {

namespace {

// What the architecture alone decides, as llama.cpp's loader does.
void set_arch_traits(ModelConfig& c) {
  c.rope_neox = c.arch != "llama";
  c.qk_norm = c.arch == "qwen3";
  c.qkv_bias = c.arch == "qwen2";
}

}  // namespace

ModelConfig read_model_config(const TensorSet& ts) {
  ModelConfig c;
  c.arch = ts.arch();
  if (c.arch != "qwen3" && c.arch != "qwen2" && c.arch != "llama")
    fail(ts.path, "unknown architecture '", c.arch, "' (bonsai runs qwen3, qwen2 and llama)");
  const std::string a = c.arch + ".";
  auto need = [&](const std::string& k) {
    const auto v = ts.meta.get_int(a + k);
    if (!v) fail(ts.path, "metadata key '", a + k, "' is missing");
    if (*v <= 0) fail(ts.path, "metadata key '", a + k, "' is ", *v, " (must be positive)");
    return *v;
  };
  c.n_embd = need("embedding_length");
  c.n_layer = need("block_count");
  c.n_ff = need("feed_forward_length");
  c.n_head = need("attention.head_count");
  c.n_ctx_train = need("context_length");
  c.n_head_kv = ts.meta.get_int(a + "attention.head_count_kv").value_or(c.n_head);
  c.head_dim = ts.meta.get_int(a + "attention.key_length").value_or(c.n_embd / c.n_head);
  c.n_rot = ts.meta.get_int(a + "rope.dimension_count").value_or(c.head_dim);
  const auto eps = ts.meta.get_float(a + "attention.layer_norm_rms_epsilon");
  if (!eps) fail(ts.path, "metadata key '", a, "attention.layer_norm_rms_epsilon' is missing");
  c.rms_eps = float(*eps);
  c.rope_base = float(ts.meta.get_float(a + "rope.freq_base").value_or(c.arch == "llama" ? 10000.0 : 1e6));
  set_arch_traits(c);
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv)
    fail(ts.path, "attention.head_count ", c.n_head, " is not a multiple of head_count_kv ", c.n_head_kv);
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2)
    fail(ts.path, "rope.dimension_count ", c.n_rot, " does not fit head size ", c.head_dim);
  if (c.arch == "llama" && c.n_rot != c.head_dim)
    fail(ts.path, "partial rotary embeddings are not supported");
  const Tensor& emb = ts.get("token_embd.weight");
  if (emb.ne.size() != 2) fail(ts.path, "tensor 'token_embd.weight' must be 2-D, is ", emb.shape_str());
  c.n_vocab = emb.ne[1];
  return c;
}

ModelConfig model_config(const HfConfig& hf) {
  ModelConfig c;
  c.arch = hf.arch;
  c.n_vocab = hf.vocab_size;
  c.n_embd = hf.hidden_size;
  c.n_layer = hf.num_layers;
  c.n_head = hf.num_heads;
  c.n_head_kv = hf.num_kv_heads;
  c.head_dim = hf.head_dim;
  c.n_rot = hf.head_dim;
  c.n_ff = hf.intermediate_size;
  c.n_ctx_train = hf.max_position_embeddings;
  c.rms_eps = float(hf.rms_norm_eps);
  c.rope_base = float(hf.rope_theta);
  set_arch_traits(c);
  return c;
}

std::vector<TensorSpec> architecture_tensors(const ModelConfig& c, bool tied) {
  const int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
  std::vector<TensorSpec> v = {{"token_embd.weight", {c.n_embd, c.n_vocab}, true}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    v.push_back({p + "attn_norm.weight", {c.n_embd}});
    v.push_back({p + "attn_q.weight", {c.n_embd, q_dim}, true});
    v.push_back({p + "attn_k.weight", {c.n_embd, kv_dim}, true});
    v.push_back({p + "attn_v.weight", {c.n_embd, kv_dim}, true});
    if (c.qkv_bias) {
      v.push_back({p + "attn_q.bias", {q_dim}});
      v.push_back({p + "attn_k.bias", {kv_dim}});
      v.push_back({p + "attn_v.bias", {kv_dim}});
    }
    if (c.qk_norm) {
      v.push_back({p + "attn_q_norm.weight", {c.head_dim}});
      v.push_back({p + "attn_k_norm.weight", {c.head_dim}});
    }
    v.push_back({p + "attn_output.weight", {q_dim, c.n_embd}, true});
    v.push_back({p + "ffn_norm.weight", {c.n_embd}});
    v.push_back({p + "ffn_gate.weight", {c.n_embd, c.n_ff}, true});
    v.push_back({p + "ffn_up.weight", {c.n_embd, c.n_ff}, true});
    v.push_back({p + "ffn_down.weight", {c.n_ff, c.n_embd}, true});
  }
  v.push_back({"output_norm.weight", {c.n_embd}});
  if (!tied) v.push_back({"output.weight", {c.n_embd, c.n_vocab}, true});
  return v;
}

void write_model_config(const ModelConfig& c, Metadata& meta) {
  const std::string a = c.arch + ".";
  meta.set_str("general.architecture", c.arch);
  meta.set_u32(a + "context_length", uint32_t(c.n_ctx_train));
  meta.set_u32(a + "embedding_length", uint32_t(c.n_embd));
  meta.set_u32(a + "block_count", uint32_t(c.n_layer));
  meta.set_u32(a + "feed_forward_length", uint32_t(c.n_ff));
  meta.set_u32(a + "attention.head_count", uint32_t(c.n_head));
  meta.set_u32(a + "attention.head_count_kv", uint32_t(c.n_head_kv));
  meta.set_u32(a + "attention.key_length", uint32_t(c.head_dim));
  meta.set_u32(a + "attention.value_length", uint32_t(c.head_dim));
  meta.set_u32(a + "rope.dimension_count", uint32_t(c.n_rot));
  meta.set_f32(a + "rope.freq_base", c.rope_base);
  meta.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
}

namespace {

std::vector<float> to_f32(const TensorSet& ts, const Tensor& t) {
  const TypeTraits& tt = traits(t.type);
  if (tt.quantized) fail(ts.path, "tensor '", t.name, "' is ", tt.name, "; norms and biases must be F32, F16 or BF16");
  std::vector<float> v(size_t(t.nelements()));
  tt.to_float(t.data, v.data(), t.nelements());
  return v;
}

}  // namespace

namespace {

// The residual codebooks of the block weights (formats/residual.h validates them against their
// base); the scheme key, when present, must agree with the tensors found.
void load_residuals(Model& m) {
  const TensorSet& f = m.file;
  const KvValue* scheme = f.meta.find("bonsai.residual.scheme");
  for (const LayerWeights& l : m.layers)
    for (const Tensor* w : l.matrices()) {
      ResidualView v;
      if (!find_residual(f, *w, &v)) continue;
      const auto want = scheme ? f.meta.get_str("bonsai.residual.scheme") : std::nullopt;
      if (!want) fail(f.path, "'", w->name, "' has residual tensors but the file has no string bonsai.residual.scheme key");
      if (*want != residual_scheme_name(v.scheme))
        fail(f.path, "bonsai.residual.scheme is '", *want, "' but the residual tensors of '", w->name, "' are ",
             residual_scheme_name(v.scheme));
      m.residuals.emplace(w, v);
    }
  for (const Tensor& t : f.tensors)
    for (const char* suffix : {kRcCodebookSuffix, kRcIndexSuffix})
      if (t.name.ends_with(suffix)) {
        const Tensor* base = f.find(t.name.substr(0, t.name.size() - std::string(suffix).size()));
        if (!base || !m.residuals.count(base))
          fail(f.path, "residual tensor '", t.name, "' refines no block weight of the model");
      }
}

}  // namespace

std::unique_ptr<Model> load_model(TensorSet ts) {
  auto m = std::make_unique<Model>();
  m->file = std::move(ts);
  const TensorSet& f = m->file;
  ModelConfig& c = m->cfg;
  c = read_model_config(f);
  // Validate every tensor of the architecture first: names and shapes, in one place.
  const bool tied = f.find("output.weight") == nullptr;
  for (const TensorSpec& spec : architecture_tensors(c, tied)) {
    const Tensor& t = f.get(spec.name);
    if (t.ne != spec.ne) {
      Tensor want;
      want.ne = spec.ne;
      fail(f.path, "tensor '", spec.name, "' has shape ", t.shape_str(), ", expected ", want.shape_str());
    }
  }
  auto get = [&](const std::string& name) { return &f.get(name); };
  auto vec = [&](const std::string& name) { return to_f32(f, f.get(name)); };
  m->token_embd = get("token_embd.weight");
  m->output = tied ? m->token_embd : get("output.weight");
  m->output_norm = vec("output_norm.weight");
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = vec(p + "attn_norm.weight");
    l.ffn_norm = vec(p + "ffn_norm.weight");
    l.wq = get(p + "attn_q.weight");
    l.wk = get(p + "attn_k.weight");
    l.wv = get(p + "attn_v.weight");
    l.wo = get(p + "attn_output.weight");
    l.gate = get(p + "ffn_gate.weight");
    l.up = get(p + "ffn_up.weight");
    l.down = get(p + "ffn_down.weight");
    if (c.qk_norm) {
      l.q_norm = vec(p + "attn_q_norm.weight");
      l.k_norm = vec(p + "attn_k_norm.weight");
    }
    if (c.qkv_bias) {
      l.bias_q = vec(p + "attn_q.bias");
      l.bias_k = vec(p + "attn_k.bias");
      l.bias_v = vec(p + "attn_v.bias");
    }
    m->layers.push_back(std::move(l));
  }
  load_residuals(*m);
  m->hadamard = read_hadamard(f.meta, f.path);
  if (!m->hadamard.empty()) {
    for (const auto& name : m->hadamard.weights) {
      const Tensor* t = f.find(name);
      if (!t) fail(f.path, "prism.hadamard.weight_names lists '", name, "', which the file does not have");
      const int64_t k = t->ne[0];
      if (k % m->hadamard.block) fail(f.path, "rotated weight '", name, "' has input width ", k, ", not a multiple of ", m->hadamard.block);
      if (!m->hadamard.signs.empty() && !m->hadamard.signs.count(k))
        fail(f.path, "no prism.hadamard sign vector of width ", k, " for '", name, "'");
    }
  }
  return m;
}

std::unique_ptr<Model> load_model(const std::string& path) { return load_model(open_model(path)); }

}  // namespace bonsai
