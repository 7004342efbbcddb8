#include "quantize/rotate.h"

#include <algorithm>

#include "formats/error.h"

namespace bonsai::quant {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<float> rotation_signs(uint64_t seed, int64_t width) {
  uint64_t state = seed ^ (uint64_t(width) * 0x9E3779B97F4A7C15ull);
  std::vector<float> s(size_t(width > 0 ? width : 0));
  for (float& v : s) v = (splitmix64(state) >> 63) ? -1.0f : 1.0f;
  return s;
}

HadamardSpec make_rotation(const std::vector<std::pair<std::string, int64_t>>& weights, int64_t block, uint64_t seed) {
  if (block < 2 || (block & (block - 1)) != 0)
    throw Error(cat("--rotate-block ", block, " must be a power of two >= 2"));
  HadamardSpec spec;
  spec.block = block;
  for (const auto& [name, width] : weights) {
    if (width % block)
      throw Error(cat("--rotate-block ", block, " does not divide the input width ", width, " of '", name,
                      "' (choose a power of two that divides every rotated width)"));
    spec.weights.insert(name);
    if (!spec.signs.count(width)) spec.signs.emplace(width, rotation_signs(seed, width));
  }
  return spec;
}

void fold_rotation(const HadamardSpec& spec, float* w, int64_t rows, int64_t cols) {
  // Rows are independent: split them across threads in runs.
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < rows; r0 += 64) hadamard_forward(spec, w + r0 * cols, std::min<int64_t>(64, rows - r0), cols);
}

}  // namespace bonsai::quant
