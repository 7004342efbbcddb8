// Opens any model this project reads, by content: a GGUF, a `.bonsai`, a safetensors file, a
// Hugging Face folder, or a llama2.c checkpoint. All come back as the same TensorSet.
#pragma once
#include <memory>
#include <span>
#include <string>

#include "formats/stream_writer.h"
#include "formats/tensor_set.h"

namespace bonsai {

// "gguf", "bonsai", "safetensors", "hf", "llama2c"; Error naming the path when unrecognised.
std::string detect_format(const std::string& path);
TensorSet open_model(const std::string& path);

}  // namespace bonsai

namespace bonsai {

// Writes GGUF when the path ends in .gguf, `.bonsai` when it ends in .bonsai (Error otherwise).
void write_model(const std::string& path, const Metadata& meta, std::span<const Tensor> tensors);
// The streaming writer (formats/stream_writer.h) of the same format, chosen the same way, for a
// model made tensor by tensor: `table` gives names, types, shapes and sizes; the bytes follow.
std::unique_ptr<StreamWriter> open_model_writer(const std::string& path, const Metadata& meta,
                                                std::span<const Tensor> table);

// A copy of `t` re-encoded to `type` (decode with the source type, encode with the target's
// reference encoder), its bytes owned by `owner`. Error naming the tensor when its row length is
// not a multiple of the target's block size.
Tensor convert_tensor(const Tensor& t, TypeId type, TensorSet& owner);

// Writes `src` to `out` (.gguf or .bonsai) with its 2-D weights re-encoded to `type` and every
// 1-D tensor (norms, biases) in F32, as llama.cpp's converter does; metadata is kept, with
// general.file_type set for the new type.
void convert_model(const TensorSet& src, TypeId type, const std::string& out);

// llama.cpp's general.file_type (llama_ftype, spec §5) for a file whose weights are mostly `type`.
uint32_t llama_file_type(TypeId type);

}  // namespace bonsai
