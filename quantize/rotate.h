// Hadamard rotation folded into the weights before calibration (QuaRot-style, on the input side):
// for every rotated weight the file stores W·S·H and the runtime feeds it H·(s ⊙ x)
// (runtime/hadamard.h, prism.hadamard.*), so the product is unchanged while the weights the
// quantizer sees have their outliers spread over each block of B inputs.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/hadamard.h"

namespace bonsai::quant {

// The ±1 sign vector of one input width: sign i is -1 when the top bit of the i-th output of
// splitmix64 seeded with seed ^ (width · 0x9E3779B97F4A7C15) is set. Each width has its own
// stream, so adding a width to a model never changes the others' signs.
std::vector<float> rotation_signs(uint64_t seed, int64_t width);

// The spec that rotates `weights` (name, input width ne[0]) with blocks of B and random signs from
// `seed`. Error when B is not a power of two >= 2 or does not divide a weight's width.
HadamardSpec make_rotation(const std::vector<std::pair<std::string, int64_t>>& weights, int64_t block, uint64_t seed);

// W (rows × cols, row-major, float) <- W·S·H: per row, signs then the normalized FWHT of each run
// of B — the same transform the runtime applies to activations (hadamard_forward), because
// (W S H)(H S x) = W x with H symmetric and orthonormal.
void fold_rotation(const HadamardSpec& spec, float* w, int64_t rows, int64_t cols);

}  // namespace bonsai::quant
