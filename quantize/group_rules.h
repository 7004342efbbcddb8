// The arithmetic of the per-group rules, for the host and the device: fit_optimal's search over
// supports (group_fit.h) and grid4's Lloyd iterations and canonical form (grid4.h), as BONSAI_HD
// functions on storage the caller owns. group_fit.cpp and grid4.cpp wrap them for the CPU, and
// quantize/cuda's GPTQ kernels call them on the device: ONE definition of each rule, so that the
// two quantizers, given the same weights, choose the same scales and codes bit for bit.
//
// That needs the same doubles on both sides: each sum below is taken in index order with every
// product and sum rounded on its own. The host build does not contract a·b + c into an FMA
// (ISO C++ mode, -ffp-contract=off), and quantize/cuda compiles with --fmad=false for this.
// fp16 conversions are bit-exact on both (formats/fp16.h).
#pragma once
#include <cmath>
#include <cstdint>

#include "formats/fp16.h"
#include "formats/hd.h"
#include "quantize/grid4.h"
#include "quantize/group_fit.h"

namespace bonsai::quant::rules {

constexpr uint16_t kFp16Sign = 0x8000, kMaxFiniteFp16 = 0x7bff;
// Lloyd on one group converges in a handful of steps; every accepted step strictly lowers the
// error over a finite set of states, so this bound only caps pathological float ties.
constexpr int kGrid4MaxSteps = 100;

BONSAI_HD inline double importance_at(const float* a, int64_t j) { return a ? double(a[j]) : 1.0; }

// `a` itself, or nullptr (unit importance) when every entry is zero (group_fit.h says why).
BONSAI_HD inline const float* effective_importance(const float* a, int64_t n) {
  if (!a) return nullptr;
  for (int64_t j = 0; j < n; ++j)
    if (a[j] > 0.0f) return a;
  return nullptr;
}

BONSAI_HD inline double weighted_energy(const float* w, const float* a, int64_t n) {
  double e = 0.0;
  for (int64_t j = 0; j < n; ++j) e += importance_at(a, j) * double(w[j]) * double(w[j]);
  return e;
}

BONSAI_HD inline double weighted_error(const float* w, const float* a, int64_t n, const int8_t* codes, float d) {
  double e = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double r = double(w[j]) - double(d) * codes[j];
    e += importance_at(a, j) * r * r;
  }
  return e;
}

BONSAI_HD inline void codes_for_scale(const float* w, int64_t n, float d, int8_t* codes) {
  for (int64_t j = 0; j < n; ++j) codes[j] = code_for_scale(w[j], d);
}

// A group with no nonzero code stores d = 0 (its decoded max is then the stored scale).
BONSAI_HD inline uint16_t zero_if_no_code(const int8_t* codes, int64_t n, uint16_t d) {
  for (int64_t j = 0; j < n; ++j)
    if (codes[j] != 0) return d;
  return 0;
}

// The order in which the support search visits the weights: decreasing |w|, equal |w| by index.
// A 64-bit key per weight — the bits of |w| (a non-negative float orders as its bits),
// complemented for decreasing, above the index — sorted ascending. Keys are distinct, so every
// correct sort (std::sort on the host, a bitonic network on the device) gives the same order.
BONSAI_HD inline uint64_t magnitude_key(float w, int64_t j) {
  return uint64_t(~f32_bits(std::fabs(w))) << 32 | uint64_t(j);
}

// Calls f(Σ_S a|w|, Σ_S a) for every prefix S of the weights in the order of the sorted keys
// whose importance sum is positive (a support of zero weight cannot change the error).
template <typename F>
BONSAI_HD void for_each_sorted_prefix(const float* w, const float* a, int64_t n, const uint64_t* sorted, F&& f) {
  double sa = 0.0, sb = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t j = int64_t(sorted[k] & 0xffffffffu);
    const double aj = importance_at(a, j);
    sa += aj * std::fabs(double(w[j]));
    sb += aj;
    if (sb > 0.0) f(sa, sb);
  }
}

// fit_optimal (group_fit.h) given the magnitude keys of w sorted ascending.
BONSAI_HD inline uint16_t fit_optimal_sorted(const float* w, const float* a, int64_t n, const uint64_t* sorted,
                                             int8_t* codes) {
  a = effective_importance(a, n);
  const double total = weighted_energy(w, a, n);
  double best = total;  // d = 0, every code 0
  uint16_t best_d = 0;
  for_each_sorted_prefix(w, a, n, sorted, [&](double sa, double sb) {
    // No d beats the real minimum total - sa²/sb: a support whose minimum is above the best so
    // far (by more than the rounding of e below) has no fp16 scale to try. Most supports stop here.
    if (total - sa * sa / sb > best + 1e-9 * total) return;
    // The quadratic's least fp16 value is one of the two that bracket s*; the float and fp16
    // roundings of s* may land on either, so both neighbours are tried too.
    const int h0 = f32_to_fp16(float(sa / sb));
    for (int h = h0 - 1; h <= h0 + 1; ++h) {
      if (h < 1 || h > kMaxFiniteFp16) continue;
      const double d = fp16_to_f32(uint16_t(h));
      const double e = total - 2.0 * d * sa + d * d * sb;
      if (e < best) {
        best = e;
        best_d = uint16_t(h);
      }
    }
  });
  codes_for_scale(w, n, fp16_to_f32(best_d), codes);
  return zero_if_no_code(codes, n, best_d);
}

BONSAI_HD inline void grid4_assign(const float* w, int64_t n, float d, int8_t* codes) {
  for (int64_t j = 0; j < n; ++j) codes[j] = code_for_grid4(w[j], d);
}

// The fp16 scale (either sign) with the least error for fixed codes: the quadratic
// Σa(w − d·c)² is least at s = Σawc / Σac², so the best stored value is one of the fp16
// neighbours of s; the current scale is a candidate too, so the error cannot rise.
BONSAI_HD inline uint16_t grid4_refit(const float* w, const float* a, int64_t n, const int8_t* codes, uint16_t current,
                                      double* err) {
  double num = 0.0, den = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double aj = importance_at(a, j);
    num += aj * double(w[j]) * codes[j];
    den += aj * double(codes[j]) * codes[j];
  }
  uint16_t best = current;
  *err = weighted_error(w, a, n, codes, fp16_to_f32(current));
  if (!(den > 0.0)) return best;
  const double s = num / den;
  const uint16_t sign = s < 0.0 ? kFp16Sign : 0;
  const int h0 = f32_to_fp16(float(std::fabs(s))) & 0x7fff;
  for (int h = h0 - 1; h <= h0 + 1; ++h) {
    if (h < 1 || h > kMaxFiniteFp16) continue;
    const uint16_t cand = uint16_t(h) | sign;
    const double e = weighted_error(w, a, n, codes, fp16_to_f32(cand));
    if (e < *err) {
      *err = e;
      best = cand;
    }
  }
  return best;
}

// Assign / refit from (codes, d, err) until a step changes nothing: an unchanged assignment refits
// to the same scale, so "no strict decrease" is exactly "converged" (and rules out cycling on
// float ties). `next`: n codes of scratch.
BONSAI_HD inline void grid4_lloyd(const float* w, const float* a, int64_t n, int8_t* codes, uint16_t& d, double& err,
                                  int8_t* next) {
  for (int step = 0; step < kGrid4MaxSteps; ++step) {
    grid4_assign(w, n, fp16_to_f32(d), next);
    double e = 0.0;
    const uint16_t nd = grid4_refit(w, a, n, next, d, &e);
    // The refit starts from the assignment's error, so a step that lowers neither is the end.
    if (!(e < err)) return;
    for (int64_t j = 0; j < n; ++j) codes[j] = next[j];
    d = nd;
    err = e;
  }
}

// canonicalize_grid4 (grid4.h).
BONSAI_HD inline void canonicalize_grid4(int8_t* codes, int64_t n, uint16_t& d) {
  bool nonzero = false, plus2 = false, unit = false;
  for (int64_t j = 0; j < n; ++j) {
    nonzero |= codes[j] != 0;
    plus2 |= codes[j] == 2;
    unit |= codes[j] == 1 || codes[j] == -1;
  }
  if (!nonzero || (d & 0x7fff) == 0) {
    for (int64_t j = 0; j < n; ++j) codes[j] = 0;
    d = 0;
    return;
  }
  if (plus2 && !unit) {
    // Only 0 and +2: the same values as ternary codes with twice the scale (exact in fp16 unless
    // it overflows, when the block stays as it is).
    const float d2 = 2.0f * fp16_to_f32(d);
    const uint16_t h2 = f32_to_fp16(d2);
    if ((h2 & 0x7fff) > kMaxFiniteFp16 || fp16_to_f32(h2) != d2) return;
    for (int64_t j = 0; j < n; ++j) codes[j] = codes[j] == 2 ? int8_t{1} : int8_t{0};
    d = h2;
    plus2 = false;
  }
  if (!plus2 && (d & kFp16Sign)) {  // ternary: the mirrored scale is the same grid, stored positive
    for (int64_t j = 0; j < n; ++j) codes[j] = int8_t(-codes[j]);
    d = uint16_t(d & 0x7fff);
  }
}

// refine_grid4 (grid4.h) on one group. `scratch`: 2n codes (the mirror start's, a Lloyd step's).
BONSAI_HD inline uint16_t refine_grid4(const float* w, const float* a, int64_t n, int8_t* codes, uint16_t d,
                                       int8_t* scratch) {
  a = effective_importance(a, n);
  int8_t* mirror = scratch;
  int8_t* next = scratch + n;
  uint16_t start_d = d;
  double start_err = weighted_error(w, a, n, codes, fp16_to_f32(d));
  uint16_t mirror_d = 0;
  double mirror_err = 0.0;
  if (d & 0x7fff) {
    // The mirror start: the same |d| with the extra level on the other side.
    mirror_d = uint16_t(d ^ kFp16Sign);
    grid4_assign(w, n, fp16_to_f32(mirror_d), mirror);
    mirror_err = weighted_error(w, a, n, mirror, fp16_to_f32(mirror_d));
    grid4_lloyd(w, a, n, mirror, mirror_d, mirror_err, next);
  }
  grid4_lloyd(w, a, n, codes, start_d, start_err, next);
  uint16_t out = start_d;
  if ((d & 0x7fff) && mirror_err < start_err) {
    for (int64_t j = 0; j < n; ++j) codes[j] = mirror[j];
    out = mirror_d;
  }
  canonicalize_grid4(codes, n, out);
  return out;
}

}  // namespace bonsai::quant::rules
