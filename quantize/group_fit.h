// Per-group rules of the stage-1 methods: one fp16 scale d ≥ 0 and codes in {-1, 0, +1} for n
// consecutive weights of one row (n = kGroup in the quantizer; any n here, so tests can check
// small groups exhaustively). Every rule returns the fp16 bits of the scale it stores and writes
// n codes; a group whose codes are all zero stores d = 0, so a stored block re-encodes to itself
// under the reference rule (its max |ŵ| is the stored scale, or 0).
#pragma once
#include <cmath>
#include <cstdint>

#include "formats/hd.h"

namespace bonsai::quant {

// The best code of one weight for a fixed scale d: sign(w)·[|w| > d/2], a tie to 0; 0 when d = 0.
// Host and device (GPTQ's column loop runs it on both).
BONSAI_HD inline int8_t code_for_scale(float w, float d) {
  if (!(d > 0.0f) || !(std::fabs(w) > 0.5f * d)) return 0;  // 0.5f·d is exact for a normal d
  return w > 0.0f ? 1 : -1;
}

// `a` itself, or nullptr (unit importance) when every entry is zero: an all-zero importance says
// nothing about the group (inputs never seen in calibration), so plain squared error is used.
const float* effective_importance(const float* a, int64_t n);

// code_for_scale over n weights: the codes that minimise Σ (w − d·c)² for this d.
void codes_for_scale(const float* w, int64_t n, float d, int8_t* codes);

// Σ a_j (w_j − d·c_j)² in double; a = nullptr weighs every input 1.
double weighted_error(const float* w, const float* a, int64_t n, const int8_t* codes, float d);

// PrismML's reference rule, as formats' PTQ1_0 encoder: d = max|w|, c = round(w/d) (half away
// from zero, with the float32 d), d stored as fp16(d).
uint16_t fit_rtn(const float* w, int64_t n, int8_t* codes);

// TWN: Δ = 0.7·mean|w|, support |w| > Δ, d = mean |w| over the support, codes sign(w) on the
// support. The support is kept as TWN defines it (not re-chosen for the fp16 scale): absmean is
// the published baseline, and `optimal` is the method that re-optimises.
uint16_t fit_absmean(const float* w, int64_t n, int8_t* codes);

// Exact minimiser of Σ a_j (w_j − d·c_j)² over fp16 scales d ≥ 0 and codes c (a = nullptr: ones).
// Its arithmetic is rules::fit_optimal_sorted (quantize/group_rules.h), which the device shares.
// For a fixed d the best codes keep |w| > d/2, a prefix of the weights sorted by |w|; for a fixed
// prefix S the error is the quadratic Σaw² − 2dΣ_S a|w| + d²Σ_S a, least at the fp16 value
// nearest to s*(S) = Σ_S a|w| / Σ_S a. So the optimum over fp16 scales is the best of the n
// prefixes, each with the fp16 neighbours of its s*, evaluated in O(1) from prefix sums.
// A group whose importance is all zero (inputs never seen) is fitted with unit importance: the
// data say nothing about it, and plain squared error is the neutral choice.
uint16_t fit_optimal(const float* w, const float* a, int64_t n, int8_t* codes);

// The same search with a real (unrounded) scale: returns s* and the least error in *err. What
// fit_optimal rounds; tests compare it with an exhaustive search over all codes.
double optimal_real_scale(const float* w, const float* a, int64_t n, double* err);

}  // namespace bonsai::quant
