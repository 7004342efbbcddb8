// Canonical ternary blocks: a file's PTQ1_0 / PQ2_0 tensor is canonical when decoding it with the
// formats library's decoder (the one the golden vectors test) and re-encoding the values by the
// reference rule gives the same bytes: PTQ1_0 by PrismML's max|w| rule (the type table's
// from_float), PQ2_0 by `reencode_grid4`. Every method's output is canonical (quantize/README.md,
// "Re-encoding"), so a block that is not was damaged or written by something else.
#pragma once
#include <cstdint>

#include "formats/tensor_set.h"

namespace bonsai::quant {

// The index of the first block (of 128 weights, in storage order) whose re-encoding differs, or
// -1 when the whole tensor is canonical. Other types: -1 (nothing to check).
int64_t first_noncanonical_block(const Tensor& t);

}  // namespace bonsai::quant
