#include "formats/hf_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>

#include "formats/error.h"
#include "formats/safetensors.h"

namespace bonsai {
namespace {

namespace fs = std::filesystem;

// Which architectures carry a tensor: required, optional, or not at all (llama.cpp would refuse
// the model, or silently ignore the tensor, so it is an error here too).
enum class Need { Req, Opt, No };
enum class Arch { Qwen3 = 0, Qwen2 = 1, Llama = 2 };
// The ggml shape a tensor must have, derived from config.json.
enum class Shape { Embd, Vocab, Q, KV, Out, HeadDim, QRows, KVRows, Gate, Down };
// llama's q/k rows are reordered from HF's half-split RoPE layout to adjacent pairs.
enum class Permute { None, ByHeads, ByKvHeads };

struct Slot {
  const char* hf;  // name after "model.layers.N." (per layer) or the whole name
  const char* gg;  // name after "blk.N." (per layer) or the whole name
  Shape shape;
  Need need[3];  // qwen3, qwen2, llama
  Permute permute = Permute::None;
};

constexpr Need R = Need::Req, O = Need::Opt, X = Need::No;

const Slot kTop[] = {
    {"model.embed_tokens.weight", "token_embd.weight", Shape::Vocab, {R, R, R}},
    {"model.norm.weight", "output_norm.weight", Shape::Embd, {R, R, R}},
    {"lm_head.weight", "output.weight", Shape::Vocab, {O, O, O}},  // absent when tied
};

// In the order llama.cpp lists a block's tensors.
const Slot kLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight", Shape::Embd, {R, R, R}},
    {"self_attn.q_proj.weight", "attn_q.weight", Shape::Q, {R, R, R}, Permute::ByHeads},
    {"self_attn.q_proj.bias", "attn_q.bias", Shape::QRows, {X, R, O}, Permute::ByHeads},
    {"self_attn.k_proj.weight", "attn_k.weight", Shape::KV, {R, R, R}, Permute::ByKvHeads},
    {"self_attn.k_proj.bias", "attn_k.bias", Shape::KVRows, {X, R, O}, Permute::ByKvHeads},
    {"self_attn.v_proj.weight", "attn_v.weight", Shape::KV, {R, R, R}},
    {"self_attn.v_proj.bias", "attn_v.bias", Shape::KVRows, {X, R, O}},
    {"self_attn.o_proj.weight", "attn_output.weight", Shape::Out, {R, R, R}},
    {"self_attn.o_proj.bias", "attn_output.bias", Shape::Embd, {X, X, O}},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", Shape::HeadDim, {R, X, X}},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", Shape::HeadDim, {R, X, X}},
    {"post_attention_layernorm.weight", "ffn_norm.weight", Shape::Embd, {R, R, R}},
    {"mlp.gate_proj.weight", "ffn_gate.weight", Shape::Gate, {R, R, R}},
    {"mlp.up_proj.weight", "ffn_up.weight", Shape::Gate, {R, R, R}},
    {"mlp.down_proj.weight", "ffn_down.weight", Shape::Down, {R, R, R}},
};
constexpr size_t kNumTop = std::size(kTop), kNumLayer = std::size(kLayer);

std::vector<int64_t> expected_ne(Shape s, const HfConfig& c) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  switch (s) {
    case Shape::Embd: return {c.hidden_size};
    case Shape::Vocab: return {c.hidden_size, c.vocab_size};
    case Shape::Q: return {c.hidden_size, q};
    case Shape::KV: return {c.hidden_size, kv};
    case Shape::Out: return {q, c.hidden_size};
    case Shape::HeadDim: return {c.head_dim};
    case Shape::QRows: return {q};
    case Shape::KVRows: return {kv};
    case Shape::Gate: return {c.hidden_size, c.intermediate_size};
    case Shape::Down: return {c.intermediate_size, c.hidden_size};
  }
  return {};
}

std::string shape_str(const std::vector<int64_t>& ne) {
  Tensor t;
  t.ne = ne;
  return t.shape_str();
}

Arch arch_of(const std::string& a) {
  return a == "qwen3" ? Arch::Qwen3 : a == "qwen2" ? Arch::Qwen2 : Arch::Llama;
}

// Rotary buffers some exports include; llama.cpp recomputes them from rope.freq_base.
bool is_skipped(const std::string& name) {
  const std::string suffix = "rotary_emb.inv_freq";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "model.layers.N.<rest>": N (decimal, no leading zeros) and rest; nullopt for other names.
std::optional<std::pair<int64_t, std::string>> split_layer(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  size_t i = prefix.size(), j = i;
  while (j < name.size() && j - i < 10 && name[j] >= '0' && name[j] <= '9') ++j;
  if (j == i || j >= name.size() || name[j] != '.' || (name[i] == '0' && j - i > 1)) return std::nullopt;
  return std::make_pair(std::stoll(name.substr(i, j - i)), name.substr(j + 1));
}

// convert_hf_to_gguf's permute: rows viewed as (n_head, 2, head_dim/2) become
// (n_head, head_dim/2, 2), turning HF's half-split rotation into ggml's adjacent pairs.
void permute_rows(const Tensor& src, int64_t n_head, uint8_t* dst) {
  const int64_t rows = src.ne.size() == 1 ? src.ne[0] : src.ne[1];
  const uint64_t row_bytes = src.nbytes / uint64_t(rows);
  const int64_t head_dim = rows / n_head, half = head_dim / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(dst + uint64_t(h * head_dim + 2 * i + j) * row_bytes,
                    src.data + uint64_t(h * head_dim + j * half + i) * row_bytes, row_bytes);
}

uint32_t file_type_of(TypeId t) {
  switch (t) {
    case TypeId::F16: return 1;
    case TypeId::BF16: return 32;
    default: return 0;
  }
}

std::string folder_name(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(dir), ec);
  if (ec) p = fs::path(dir);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

struct Mapped {
  std::tuple<int, int64_t, size_t> order;  // (top before / blocks / after, layer, slot)
  std::string name;
  const Tensor* src;
  const Slot* slot;
};

}  // namespace

TensorSet open_hf_model(const std::string& dir) {
  std::error_code ec;  // the non-throwing forms: an unreadable path is just "not there"
  if (!fs::is_directory(dir, ec)) fail(dir, "not a folder (a Hugging Face model is a folder)");
  const fs::path d(dir);
  const HfConfig cfg = read_hf_config((d / "config.json").string());
  std::string weights;
  for (const char* f : {"model.safetensors", "model.safetensors.index.json"})
    if (weights.empty() && fs::exists(d / f, ec)) weights = (d / f).string();
  if (weights.empty()) fail(dir, "holds neither model.safetensors nor model.safetensors.index.json");
  const auto src = std::make_shared<TensorSet>(read_safetensors(weights));

  TensorSet out;
  out.path = dir;
  out.format = "hf";
  out.keep(src);
  const Arch arch = arch_of(cfg.arch);
  const int ai = int(arch);

  std::vector<Mapped> mapped;
  std::vector<bool> seen(kNumTop + size_t(cfg.num_layers) * kNumLayer, false);
  std::map<TypeId, int64_t> elems_by_type;  // for general.file_type
  for (const Tensor& t : src->tensors) {
    if (is_skipped(t.name)) continue;
    const Slot* slot = nullptr;
    size_t seen_at = 0;
    Mapped m{};
    if (auto layer = split_layer(t.name)) {
      for (size_t i = 0; i < kNumLayer; ++i)
        if (layer->second == kLayer[i].hf) slot = &kLayer[i], seen_at = i;
      if (slot && layer->first >= cfg.num_layers)
        fail(dir, "tensor '", t.name, "' is in layer ", layer->first, ", but config.json has ",
             cfg.num_layers, " layers");
      if (slot) {
        seen_at += kNumTop + size_t(layer->first) * kNumLayer;
        m = {{1, layer->first, size_t(slot - kLayer)}, cat("blk.", layer->first, ".", slot->gg), &t, slot};
      }
    } else {
      for (size_t i = 0; i < kNumTop; ++i)
        if (t.name == kTop[i].hf) slot = &kTop[i], seen_at = i;
      if (slot) m = {{slot == &kTop[0] ? 0 : 2, 0, seen_at}, slot->gg, &t, slot};
    }
    if (!slot || slot->need[ai] == Need::No)
      fail(dir, "tensor '", t.name, "' is not part of a ", cfg.arch, " model");
    const auto want = expected_ne(slot->shape, cfg);
    if (t.ne != want)
      fail(dir, "tensor '", t.name, "' has shape ", t.shape_str(), ", config.json implies ", shape_str(want));
    seen[seen_at] = true;
    // Tied embeddings: llama.cpp reads token_embd for the output, so a stored copy is dropped.
    if (slot == &kTop[2] && cfg.tie_word_embeddings) continue;
    if (t.ne.size() > 1) elems_by_type[t.type] += t.nelements();
    mapped.push_back(std::move(m));
  }
  for (size_t i = 0; i < kNumTop; ++i)
    if (!seen[i] && kTop[i].need[ai] == Need::Req) fail(dir, "tensor '", kTop[i].hf, "' is missing");
  if (!seen[2] && !cfg.tie_word_embeddings)
    fail(dir, "lm_head.weight is missing and config.json does not tie it to the embeddings");
  for (int64_t l = 0; l < cfg.num_layers; ++l)
    for (size_t i = 0; i < kNumLayer; ++i)
      if (!seen[kNumTop + size_t(l) * kNumLayer + i] && kLayer[i].need[ai] == Need::Req)
        fail(dir, "tensor 'model.layers.", l, ".", kLayer[i].hf, "' is missing");
  std::sort(mapped.begin(), mapped.end(), [](const Mapped& a, const Mapped& b) { return a.order < b.order; });

  for (const Mapped& m : mapped) {
    Tensor t = *m.src;
    t.name = m.name;
    if (arch == Arch::Llama && m.slot->permute != Permute::None) {
      uint8_t* buf = out.alloc(t.nbytes);
      permute_rows(*m.src, m.slot->permute == Permute::ByHeads ? cfg.num_heads : cfg.num_kv_heads, buf);
      t.data = buf;
    } else if (t.ne.size() == 1 && t.type != TypeId::F32) {
      // Norms and biases are F32 in a llama.cpp conversion whatever the checkpoint's dtype.
      auto* buf = reinterpret_cast<float*>(out.alloc(uint64_t(t.ne[0]) * sizeof(float)));
      traits(t.type).to_float(t.data, buf, t.ne[0]);
      t.type = TypeId::F32;
      t.data = reinterpret_cast<const uint8_t*>(buf);
      t.nbytes = uint64_t(t.ne[0]) * sizeof(float);
    }
    out.add(std::move(t));
  }

  const std::string& a = cfg.arch;
  Metadata& meta = out.meta;
  meta.set_str("general.architecture", a);
  meta.set_str("general.name", folder_name(dir));
  meta.set_u32(a + ".block_count", uint32_t(cfg.num_layers));
  meta.set_u32(a + ".context_length", uint32_t(cfg.max_position_embeddings));
  meta.set_u32(a + ".embedding_length", uint32_t(cfg.hidden_size));
  meta.set_u32(a + ".feed_forward_length", uint32_t(cfg.intermediate_size));
  meta.set_u32(a + ".attention.head_count", uint32_t(cfg.num_heads));
  meta.set_u32(a + ".attention.head_count_kv", uint32_t(cfg.num_kv_heads));
  meta.set_f32(a + ".rope.freq_base", float(cfg.rope_theta));
  meta.set_f32(a + ".attention.layer_norm_rms_epsilon", float(cfg.rms_norm_eps));
  meta.set_u32(a + ".attention.key_length", uint32_t(cfg.head_dim));
  meta.set_u32(a + ".attention.value_length", uint32_t(cfg.head_dim));
  if (arch == Arch::Llama) {
    meta.set_u32(a + ".vocab_size", uint32_t(cfg.vocab_size));
    meta.set_u32(a + ".rope.dimension_count", uint32_t(cfg.head_dim));
  }
  TypeId dominant = TypeId::F32;
  int64_t most = -1;
  for (const auto& [type, n] : elems_by_type)
    if (n > most) dominant = type, most = n;
  meta.set_u32("general.file_type", file_type_of(dominant));

  const fs::path tok = d / "tokenizer.json";
  if (fs::exists(tok, ec)) add_hf_tokenizer(tok.string(), cfg.vocab_size, meta);
  return out;
}

}  // namespace bonsai
