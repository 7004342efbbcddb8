// One definition of the decoder-only transformers bonsai runs — qwen3 (per-head q/k RMSNorm),
// qwen2 (q/k/v bias) and llama — built from any TensorSet (GGUF, .bonsai, Hugging Face folder,
// llama2.c). Weights stay in their stored types; the model only checks names and shapes and
// records where every weight is. Backends (cpu/, cuda/) run it through backend.h.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/residual.h"
#include "formats/tensor_set.h"
#include "runtime/hadamard.h"

namespace bonsai {

struct HfConfig;  // formats/hf_model.h

struct ModelConfig {
  std::string arch;  // "qwen3", "qwen2", "llama"
  int64_t n_vocab = 0, n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
  int64_t n_ctx_train = 0, n_rot = 0;
  float rms_eps = 1e-6f, rope_base = 10000.0f;
  bool rope_neox = false;  // half-split rotation (qwen) instead of adjacent pairs (llama)
  bool qk_norm = false;    // qwen3
  bool qkv_bias = false;   // qwen2
};

struct LayerWeights {
  const Tensor *wq, *wk, *wv, *wo, *gate, *up, *down;
  // The seven matrices in block order (q, k, v, output, gate, up, down), as values, or as slots
  // for a quantizer to point at their replacements.
  std::array<const Tensor*, 7> matrices() const { return {wq, wk, wv, wo, gate, up, down}; }
  std::array<const Tensor**, 7> slots() { return {&wq, &wk, &wv, &wo, &gate, &up, &down}; }
  // The first weight of each group of products that read one input (q/k/v, output, gate/up,
  // down): whose name keys that input's calibration statistics.
  std::array<const Tensor*, 4> group_inputs() const { return {wq, wo, gate, down}; }
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;     // f32 copies (norms are tiny)
  std::vector<float> bias_q, bias_k, bias_v;
};

struct Model {
  TensorSet file;
  ModelConfig cfg;
  const Tensor* token_embd = nullptr;
  const Tensor* output = nullptr;  // == token_embd when tied
  std::vector<float> output_norm;
  std::vector<LayerWeights> layers;
  HadamardSpec hadamard;  // empty unless the file declares prism.hadamard.*
  // Block weights with residual codebooks (bonsai.residual.*): W·x = Ŵ·x + R̂·x.
  std::unordered_map<const Tensor*, ResidualView> residuals;
};

// Every tensor the architecture has, with its ggml shape: the one list load_model validates
// against and synth generates from. `matrix` marks the 2-D weights a quantization type applies to.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;
  bool matrix = false;
};
// tied: no output.weight (the head reads token_embd).
std::vector<TensorSpec> architecture_tensors(const ModelConfig& c, bool tied);

// Writes the `<arch>.*` hyperparameter keys a llama.cpp loader needs (spec §7).
void write_model_config(const ModelConfig& c, Metadata& meta);

// Reads the hyperparameters from `<arch>.*` keys; Error naming the file for an unknown
// architecture or a missing key.
ModelConfig read_model_config(const TensorSet& ts);
// The hyperparameters a Hugging Face config.json gives (formats/hf_config.cpp reads and checks
// it): those read_model_config finds in the keys open_hf_model writes from it.
ModelConfig model_config(const HfConfig& hf);

// Opens and validates: every tensor present with the expected shape (errors name the tensor,
// its shape and the expected one), a type the runtime can compute with.
std::unique_ptr<Model> load_model(const std::string& path);
std::unique_ptr<Model> load_model(TensorSet ts);

}  // namespace bonsai
