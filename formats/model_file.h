// Opens any model this project reads, by content: a GGUF, a `.bonsai`, a safetensors file, a
// Hugging Face folder, or a llama2.c checkpoint. All come back as the same TensorSet.
#pragma once
#include <string>

#include "formats/tensor_set.h"

namespace bonsai {

// "gguf", "bonsai", "safetensors", "hf", "llama2c"; Error naming the path when unrecognised.
std::string detect_format(const std::string& path);
TensorSet open_model(const std::string& path);

}  // namespace bonsai
