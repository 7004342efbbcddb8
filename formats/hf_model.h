// A Hugging Face model folder (config.json + safetensors + tokenizer.json) read as the GGUF a
// llama.cpp conversion would produce: tensors renamed to llama.cpp names (spec §7), the
// architecture's hyperparameters as `<arch>.*` keys, the tokenizer as `tokenizer.ggml.*` keys.
// Architectures: qwen3, qwen2, llama (llama's q/k rows are permuted to the "normal" RoPE
// layout, as convert_hf_to_gguf does).
#pragma once
#include <optional>
#include <string>

#include "formats/metadata.h"
#include "formats/tensor_set.h"

namespace bonsai {

struct HfConfig {
  std::string arch;  // "qwen3", "qwen2", "llama"
  int64_t hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0;
  int64_t head_dim = 0, vocab_size = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  std::optional<int64_t> bos_token_id, eos_token_id;
};

// Throws Error naming the file for missing/ill-typed fields and unknown architectures.
HfConfig read_hf_config(const std::string& config_json_path);

// Adds tokenizer.ggml.* keys (model gpt2, pre, tokens, token_type, merges, special ids) from a
// Hugging Face byte-level BPE tokenizer.json (and tokenizer_config.json beside it, when present).
void add_hf_tokenizer(const std::string& tokenizer_json_path, int64_t n_vocab, Metadata& meta);

// Opens a folder holding config.json, model.safetensors or model.safetensors.index.json, and
// tokenizer.json.
TensorSet open_hf_model(const std::string& dir);

}  // namespace bonsai
