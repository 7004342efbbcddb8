#include "quantize/grid4.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/group_fit.h"

namespace bonsai::quant {
namespace {

constexpr uint16_t kSign = 0x8000, kMaxFiniteMagnitude = 0x7bff;
// Lloyd on one group converges in a handful of steps; every accepted step strictly lowers the
// error over a finite set of states, so this bound only caps pathological float ties.
constexpr int kMaxSteps = 100;

struct State {
  std::vector<int8_t> codes;
  uint16_t d = 0;
  double err = 0;
};

void assign(const float* w, int64_t n, float d, int8_t* codes) {
  for (int64_t j = 0; j < n; ++j) codes[j] = code_for_grid4(w[j], d);
}

// The fp16 scale (either sign) with the least error for fixed codes: the quadratic
// Σa(w − d·c)² is least at s = Σawc / Σac², so the best stored value is one of the fp16
// neighbours of s; the current scale is a candidate too, so the error cannot rise.
uint16_t refit(const float* w, const float* a, int64_t n, const int8_t* codes, uint16_t current, double* err) {
  double num = 0.0, den = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double aj = a ? double(a[j]) : 1.0;
    num += aj * double(w[j]) * codes[j];
    den += aj * double(codes[j]) * codes[j];
  }
  uint16_t best = current;
  *err = weighted_error(w, a, n, codes, fp16_to_f32(current));
  if (!(den > 0.0)) return best;
  const double s = num / den;
  const uint16_t sign = s < 0.0 ? kSign : 0;
  const int h0 = f32_to_fp16(float(std::fabs(s))) & 0x7fff;
  for (int h = h0 - 1; h <= h0 + 1; ++h) {
    if (h < 1 || h > kMaxFiniteMagnitude) continue;
    const uint16_t cand = uint16_t(h) | sign;
    const double e = weighted_error(w, a, n, codes, fp16_to_f32(cand));
    if (e < *err) {
      *err = e;
      best = cand;
    }
  }
  return best;
}

// Assign / refit from `s` until a step changes nothing: an unchanged assignment refits to the same
// scale, so "no strict decrease" is exactly "converged" (and rules out cycling on float ties).
void lloyd(const float* w, const float* a, int64_t n, State& s) {
  std::vector<int8_t> next(static_cast<size_t>(n));
  for (int step = 0; step < kMaxSteps; ++step) {
    assign(w, n, fp16_to_f32(s.d), next.data());
    double err = 0.0;
    const uint16_t d = refit(w, a, n, next.data(), s.d, &err);
    // The refit starts from the assignment's error, so a step that lowers neither is the end.
    if (!(err < s.err)) return;
    s.codes = next;
    s.d = d;
    s.err = err;
  }
}

}  // namespace

void canonicalize_grid4(int8_t* codes, int64_t n, uint16_t& d) {
  bool nonzero = false, plus2 = false, unit = false;
  for (int64_t j = 0; j < n; ++j) {
    nonzero |= codes[j] != 0;
    plus2 |= codes[j] == 2;
    unit |= codes[j] == 1 || codes[j] == -1;
  }
  if (!nonzero || (d & 0x7fff) == 0) {
    std::fill(codes, codes + n, int8_t{0});
    d = 0;
    return;
  }
  if (plus2 && !unit) {
    // Only 0 and +2: the same values as ternary codes with twice the scale (exact in fp16 unless
    // it overflows, when the block stays as it is).
    const float d2 = 2.0f * fp16_to_f32(d);
    const uint16_t h2 = f32_to_fp16(d2);
    if ((h2 & 0x7fff) > kMaxFiniteMagnitude || fp16_to_f32(h2) != d2) return;
    for (int64_t j = 0; j < n; ++j) codes[j] = codes[j] == 2 ? int8_t{1} : int8_t{0};
    d = h2;
    plus2 = false;
  }
  if (!plus2 && (d & kSign)) {  // ternary: the mirrored scale is the same grid, stored positive
    for (int64_t j = 0; j < n; ++j) codes[j] = int8_t(-codes[j]);
    d = uint16_t(d & 0x7fff);
  }
}

uint16_t refine_grid4(const float* w, const float* a, int64_t n, int8_t* codes, uint16_t d) {
  a = effective_importance(a, n);
  State start;
  start.codes.assign(codes, codes + n);
  start.d = d;
  start.err = weighted_error(w, a, n, codes, fp16_to_f32(d));
  State mirror;
  if (d & 0x7fff) {
    // The mirror start: the same |d| with the extra level on the other side.
    mirror.d = uint16_t(d ^ kSign);
    mirror.codes.resize(size_t(n));
    assign(w, n, fp16_to_f32(mirror.d), mirror.codes.data());
    mirror.err = weighted_error(w, a, n, mirror.codes.data(), fp16_to_f32(mirror.d));
    lloyd(w, a, n, mirror);
  }
  lloyd(w, a, n, start);
  const State& best = (d & 0x7fff) && mirror.err < start.err ? mirror : start;
  std::copy(best.codes.begin(), best.codes.end(), codes);
  uint16_t out = best.d;
  canonicalize_grid4(codes, n, out);
  return out;
}

uint16_t reencode_grid4(const float* y, int64_t n, int8_t* codes) {
  float m = 0.0f, top = 0.0f;
  for (int64_t j = 0; j < n; ++j)
    if (std::fabs(y[j]) > m) m = std::fabs(y[j]), top = y[j];
  bool ternary = true;
  for (int64_t j = 0; j < n; ++j) ternary &= y[j] == 0.0f || std::fabs(y[j]) == m;
  const float d = m == 0.0f ? 0.0f : ternary ? m : top / 2.0f;
  const uint16_t h = f32_to_fp16(d);
  const float df = fp16_to_f32(h);
  for (int64_t j = 0; j < n; ++j)
    codes[j] = df == 0.0f ? int8_t{0} : int8_t(std::clamp(std::lround(y[j] / df), -1L, 2L));
  return h;
}

TernaryMatrix refine_grid4(const MatrixIn& in, const TernaryMatrix& stage1) {
  if (stage1.rows != in.rows || stage1.cols != in.cols || stage1.codes.size() != size_t(in.rows * in.cols) ||
      stage1.scales.size() != size_t(in.rows * (in.cols / kGroup)))
    throw Error(cat("quantize: stage 2 given a stage-1 result of ", stage1.rows, " x ", stage1.cols, " for a ", in.rows,
                    " x ", in.cols, " matrix"));
  TernaryMatrix out = stage1;
  const int64_t groups = in.cols / kGroup;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const size_t o = size_t(r * in.cols + g * kGroup), b = size_t(r * groups + g);
      out.scales[b] = refine_grid4(in.w + o, in.importance ? in.importance + g * kGroup : nullptr, kGroup,
                                   out.codes.data() + o, out.scales[b]);
    }
  return out;
}

double share_of_plus2(const TernaryMatrix& m) {
  if (m.codes.empty()) return 0.0;
  const auto n = std::count(m.codes.begin(), m.codes.end(), int8_t{2});
  return double(n) / double(m.codes.size());
}

}  // namespace bonsai::quant
