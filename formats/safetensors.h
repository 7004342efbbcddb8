// safetensors (a single file, or a sharded model.safetensors.index.json): memory-mapped, header
// size bounded, dtype / shape / offsets validated. Tensors keep their file names; shapes are
// converted to ggml order (ne[0] = last safetensors dimension). Only F32, F16 and BF16 are
// accepted (anything else is a named error).
#pragma once
#include <string>

#include "formats/tensor_set.h"

namespace bonsai {

TensorSet read_safetensors(const std::string& path);

}  // namespace bonsai
