// Synthetic models: random weights at the real shapes of a known model, in any weight type, for
// speed measurements at real scale. Marked synthetic in the metadata (general.name and
// bonsai.synthetic); with a tokenizer the GGUF is complete enough for llama.cpp to load.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/types.h"
#include "runtime/model.h"

namespace bonsai {

struct SynthOptions {
  std::string arch = "qwen3";
  std::string size = "0.6b";
  TypeId type = TypeId::PTQ1_0;         // the blocks' linear weights
  TypeId embd_type = TypeId::Q8_0;      // token_embd.weight
  TypeId output_type = TypeId::Q8_0;    // output.weight (untied sizes only)
  std::string tokenizer;                // tokenizer.json; empty: no tokenizer keys
  uint64_t seed = 1;
  // Residual codebooks (formats/residual.h, kmeans scheme) on every block weight, PQ2_0 only:
  // random fp16 centroids and random indices in the quantizer's layout and keys, so that bench
  // measures what the residual costs. rc_rows: rows per codebook, 0 = all rows of each tensor.
  bool residual = false;
  int64_t rc_dim = 8, rc_size = 16, rc_rows = 0;
};

// The sizes synth knows for an architecture ("0.6b", "1.7b", "4b", "8b" for qwen3; "tiny").
std::vector<std::string> synth_sizes(const std::string& arch);
// The configuration of a known size; tied says whether the real model ties its head.
ModelConfig synth_config(const std::string& arch, const std::string& size, bool* tied);
// Writes the model (.gguf or .bonsai by extension); progress(done, total) after each tensor.
// Error before writing anything when the residual options do not fit the type or the shapes.
void synth_model(const SynthOptions& o, const std::string& out,
                 const std::function<void(size_t, size_t)>& progress = {});

}  // namespace bonsai
