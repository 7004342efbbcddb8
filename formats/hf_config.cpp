// config.json of a Hugging Face causal LM: the fields a llama.cpp conversion reads for qwen3,
// qwen2 and llama, each checked for presence and type.
#include <climits>

#include "formats/error.h"
#include "formats/hf_model.h"
#include "formats/json_file.h"

namespace bonsai {
namespace {

using nlohmann::json;

// Absent and null mean the same in these files ("head_dim": null is common).
const json* field(const json& cfg, const char* key) {
  const auto it = cfg.find(key);
  return it == cfg.end() || it->is_null() ? nullptr : &*it;
}

// A count: a positive integer that fits the u32 GGUF keys it becomes.
std::optional<int64_t> get_count(const std::string& path, const json& cfg, const char* key) {
  const json* v = field(cfg, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > INT32_MAX)
    fail(path, "field '", key, "' must be a positive integer, not ", json_brief(*v));
  return v->get<int64_t>();
}

int64_t need_count(const std::string& path, const json& cfg, const char* key) {
  if (auto v = get_count(path, cfg, key)) return *v;
  fail(path, "required field '", key, "' is missing");
}

std::optional<double> get_number(const std::string& path, const json& cfg, const char* key) {
  const json* v = field(cfg, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail(path, "field '", key, "' must be a number, not ", json_kind(*v));
  return v->get<double>();
}

// Token ids: an integer, or a list whose first entry is used (llama 3.1 lists several eos ids).
std::optional<int64_t> get_token_id(const std::string& path, const json& cfg, const char* key) {
  const json* v = field(cfg, key);
  if (!v) return std::nullopt;
  if (v->is_array() && !v->empty()) v = &(*v)[0];
  if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > INT32_MAX)
    fail(path, "field '", key, "' must be a token id, not ", json_brief(*v));
  return v->get<int64_t>();
}

}  // namespace

HfConfig read_hf_config(const std::string& path) {
  const json cfg = read_json_file(path);
  if (!cfg.is_object()) fail(path, "must hold a JSON object, not ", json_kind(cfg));
  HfConfig c;
  const json* type = field(cfg, "model_type");
  if (!type) fail(path, "required field 'model_type' is missing");
  if (!type->is_string()) fail(path, "field 'model_type' must be a string, not ", json_kind(*type));
  c.arch = type->get<std::string>();
  if (c.arch != "qwen3" && c.arch != "qwen2" && c.arch != "llama")
    fail(path, "unknown architecture '", c.arch, "' (qwen3, qwen2 and llama are supported)");

  c.hidden_size = need_count(path, cfg, "hidden_size");
  c.intermediate_size = need_count(path, cfg, "intermediate_size");
  c.num_layers = need_count(path, cfg, "num_hidden_layers");
  c.num_heads = need_count(path, cfg, "num_attention_heads");
  c.vocab_size = need_count(path, cfg, "vocab_size");
  c.max_position_embeddings = need_count(path, cfg, "max_position_embeddings");
  c.num_kv_heads = get_count(path, cfg, "num_key_value_heads").value_or(c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    fail(path, "num_attention_heads ", c.num_heads, " is not a multiple of num_key_value_heads ",
         c.num_kv_heads);
  if (auto hd = get_count(path, cfg, "head_dim")) {
    c.head_dim = *hd;
  } else {
    if (c.hidden_size % c.num_heads != 0)
      fail(path, "no head_dim, and hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ",
           c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) fail(path, "head_dim ", c.head_dim, " is odd; RoPE rotates pairs");

  const auto eps = get_number(path, cfg, "rms_norm_eps");
  if (!eps) fail(path, "required field 'rms_norm_eps' is missing");
  if (!(*eps > 0)) fail(path, "field 'rms_norm_eps' must be positive");
  c.rms_norm_eps = *eps;
  c.rope_theta = get_number(path, cfg, "rope_theta").value_or(10000.0);
  if (!(c.rope_theta > 0)) fail(path, "field 'rope_theta' must be positive");

  // RoPE scaling changes the positions the model was trained with; converting without it would
  // give a silently different model, so only its absence (or "default") is accepted.
  if (const json* rs = field(cfg, "rope_scaling")) {
    std::string kind = "?";
    if (rs->is_object())
      for (const char* k : {"rope_type", "type"})
        if (auto it = rs->find(k); it != rs->end() && it->is_string()) kind = it->get<std::string>();
    if (kind != "default") fail(path, "rope_scaling of type '", kind, "' is not supported");
  }

  if (const json* tie = field(cfg, "tie_word_embeddings")) {
    if (!tie->is_boolean()) fail(path, "field 'tie_word_embeddings' must be true or false");
    c.tie_word_embeddings = tie->get<bool>();
  }
  c.bos_token_id = get_token_id(path, cfg, "bos_token_id");
  c.eos_token_id = get_token_id(path, cfg, "eos_token_id");
  return c;
}

}  // namespace bonsai
