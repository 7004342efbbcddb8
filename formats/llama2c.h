// llama2.c checkpoints (the legacy run.c `.bin`: 7 int32 header, float32 weights) and its
// tokenizer (`tok512.bin`), read as the llama-architecture GGUF llama.cpp's converter makes:
// llama.cpp tensor names, `llama.*` hyperparameters and `tokenizer.ggml.*` (model "llama").
#pragma once
#include <string>

#include "formats/tensor_set.h"

namespace bonsai {

// tokenizer_path empty: looks for tok512.bin / tokenizer.bin beside the checkpoint; without
// one the set has no tokenizer keys.
TensorSet read_llama2c(const std::string& path, const std::string& tokenizer_path = "");

// Adds tokenizer.ggml.* (model "llama": tokens, scores, token_type, bos/eos/unk) from a
// llama2.c tokenizer file.
void add_llama2c_tokenizer(const std::string& path, Metadata& meta);

}  // namespace bonsai
