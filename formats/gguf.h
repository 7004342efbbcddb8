// GGUF v3 (spec §3). The reader memory-maps the file and validates everything it trusts before
// using it: magic, version, counts and lengths bounded by the file size, alignment a power of two,
// every tensor inside the data section at ggml's expected offset, ne[0] a multiple of the block
// size, no size overflow, known type ids. The writer stores any metadata and tensors atomically.
#pragma once
#include <span>
#include <string>

#include "formats/tensor_set.h"

namespace bonsai {

// Throws Error("<path>: <what is wrong>") for any malformed input; never reads past the map.
TensorSet read_gguf(const std::string& path);

// Writes GGUF v3 through AtomicFile. Alignment: meta's general.alignment (u32, a power of two)
// when present, else 32. Tensors are laid out in the given order, each padded to the alignment.
void write_gguf(const std::string& path, const Metadata& meta, std::span<const Tensor> tensors);

}  // namespace bonsai
