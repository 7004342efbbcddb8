// The `prism.hadamard.*` activation transform (shared/specs/formats.md §2): for every weight in
// weight_names the file stores W·S·H, so the runtime feeds it H·(s ⊙ x), where H is the
// normalized Sylvester Walsh–Hadamard matrix applied to each run of B inputs. Parsed and
// validated here; anything inconsistent is a load error (never run a rotated file unrotated).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/metadata.h"

namespace bonsai {

struct HadamardSpec {
  int64_t block = 0;                                // B; 0 when the file has no transform
  std::map<int64_t, std::vector<float>> signs;      // width -> ±1 vector (explicit mode)
  std::set<std::string> weights;                    // rotated weights (input side)
  std::set<std::string> inverse_weights;            // lookup tables stored rotated (token_embd)

  bool empty() const { return block == 0; }
  bool rotates(const std::string& weight) const { return weights.count(weight) > 0; }
};

HadamardSpec read_hadamard(const Metadata& meta, const std::string& path_for_errors);
// Writes the keys for a spec (version 1, explicit signs when any).
void write_hadamard(const HadamardSpec& spec, Metadata& meta);

// x (n rows of width k) <- H_B(s_k ⊙ x) in place, for the forward side of a rotated weight.
void hadamard_forward(const HadamardSpec& spec, float* x, int64_t n, int64_t k);
// z (n rows of width k) <- s_k ⊙ (H_B z): maps a rotated lookup row back (H is its own inverse).
void hadamard_inverse(const HadamardSpec& spec, float* z, int64_t n, int64_t k);
// In-place normalized fast Walsh–Hadamard transform of one run of B = 2^m values.
void fwht(float* x, int64_t b);

}  // namespace bonsai
