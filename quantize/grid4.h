// Stage 2: PQ2_0's four-level grid {−1, 0, +1, +2}·d per group of weights, d an fp16 of either
// sign (a negative d mirrors the grid, putting the extra level on the negative side). Stage 1's
// ternary codes are a point on this grid; an importance-weighted Lloyd iteration (assign each
// weight to its nearest level, refit d by weighted least squares, until no assignment changes)
// moves from there and never increases the error, because every step is an exact minimisation
// over its own variables with the stored (fp16) scale.
//
// Canonical blocks: a PQ2_0 block decodes to values; `reencode_grid4` recovers the codes and
// scale from those values alone. The fitter stores every group in that canonical form (d ≥ 0
// when +2 is unused, d = 0 when every code is 0, a group using only 0 and +2 stored as ternary
// with twice the scale), so decode → re-encode gives the same bytes.
#pragma once
#include <cmath>
#include <cstdint>

#include "formats/hd.h"
#include "quantize/ternary.h"

namespace bonsai::quant {

// The nearest level of w on {−1, 0, +1, +2}·d (ties to the smaller |code|); 0 when d = 0.
// Host and device (GPTQ's column loop runs it on both).
BONSAI_HD inline int8_t code_for_grid4(float w, float d) {
  if (d == 0.0f || !std::isfinite(d)) return 0;
  const float u = w / d;  // the grid in units of d: nearest of −1, 0, 1, 2
  if (u > 1.5f) return 2;
  if (u > 0.5f) return 1;
  if (u < -0.5f) return -1;
  return 0;
}

// Rewrites (codes, d) in the canonical form above without changing any decoded value.
void canonicalize_grid4(int8_t* codes, int64_t n, uint16_t& d);

// The arithmetic of canonicalize_grid4 and refine_grid4 is in quantize/group_rules.h, shared with
// the device.
//
// Lloyd iterations on one group from (codes, d) — codes on the grid, d the stored fp16 bits.
// a = importance per weight (nullptr or all zero: ones). Returns the canonical stored scale and
// leaves the canonical codes; the weighted error is never above the start's. Both signs of d are
// tried (the start and its mirror), the better kept.
uint16_t refine_grid4(const float* w, const float* a, int64_t n, int8_t* codes, uint16_t d);

// The canonical codes and scale of n decoded values y that some (codes, d) on the grid produced:
// the largest |y| is |d| when every nonzero |y| is equal (ternary), else 2|d| with the sign of
// that value. Returns the fp16 bits of d.
uint16_t reencode_grid4(const float* y, int64_t n, int8_t* codes);

// Stage 2 on a whole matrix from its stage-1 result: refine_grid4 per (row, group).
TernaryMatrix refine_grid4(const MatrixIn& in, const TernaryMatrix& stage1);

// The share of codes equal to +2 (PQ2_0's code 3) in a matrix.
double share_of_plus2(const TernaryMatrix& m);

}  // namespace bonsai::quant
