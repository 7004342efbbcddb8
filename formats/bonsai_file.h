// The `.bonsai` container, version 1 (docs/formats/bonsai.md): metadata (architecture,
// hyperparameters, tokenizer, plan, provenance), a tensor table with a checksum per tensor,
// aligned data. The reader verifies every checksum it is asked to and names the tensor whose
// bytes do not match; the writer is atomic.
#pragma once
#include <span>
#include <string>

#include "formats/tensor_set.h"

namespace bonsai {

struct BonsaiReadOptions {
  bool verify_checksums = true;
};

TensorSet read_bonsai(const std::string& path, const BonsaiReadOptions& opts = {});

// Adds the provenance keys the format requires when the caller has not set them
// (bonsai.tool_version, bonsai.created — pinned by SOURCE_DATE_EPOCH when set).
void write_bonsai(const std::string& path, const Metadata& meta, std::span<const Tensor> tensors);

}  // namespace bonsai
