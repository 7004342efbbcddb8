// GGUF v3 (spec §3). The reader memory-maps the file and validates everything it trusts before
// using it: magic, version, counts and lengths bounded by the file size, alignment a power of two,
// every tensor inside the data section at ggml's expected offset, ne[0] a multiple of the block
// size, no size overflow, known type ids. The writer stores any metadata and tensors atomically,
// streaming (GgufWriter) or from memory (write_gguf, built on it: one definition of the layout).
#pragma once
#include <span>
#include <string>

#include "formats/stream_writer.h"
#include "formats/tensor_set.h"

namespace bonsai {

// Throws Error("<path>: <what is wrong>") for any malformed input; never reads past the map.
TensorSet read_gguf(const std::string& path);

// GGUF v3 written tensor by tensor (formats/stream_writer.h). Alignment: meta's general.alignment
// (u32, a power of two) when present, else 32. Tensors are laid out in the table's order, each
// padded to the alignment, the file too. The constructor checks the metadata (each value against
// its type) and every entry (name length, dimensions, type, shape, nbytes = what the type and
// shape need; data is not read) and creates nothing: Error naming `path` and the culprit.
class GgufWriter : public StreamWriter {
 public:
  GgufWriter(std::string path, const Metadata& meta, std::span<const Tensor> table);
};

// The same from tensors in memory: GgufWriter with every tensor's data.
void write_gguf(const std::string& path, const Metadata& meta, std::span<const Tensor> tensors);

}  // namespace bonsai
