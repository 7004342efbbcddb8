#include "quantize/group_fit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/fp16.h"

namespace bonsai::quant {
namespace {

constexpr uint16_t kMaxFiniteFp16 = 0x7bff;

double importance(const float* a, int64_t j) { return a ? double(a[j]) : 1.0; }

double weighted_energy(const float* w, const float* a, int64_t n) {
  double e = 0.0;
  for (int64_t j = 0; j < n; ++j) e += importance(a, j) * double(w[j]) * double(w[j]);
  return e;
}

// Calls f(Σ_S a|w|, Σ_S a) for every prefix S of the weights in order of decreasing |w| whose
// importance sum is positive (a support of zero weight cannot change the error).
// Equal |w| keep their index order. The order is sorted as 64-bit keys: the bits of |w| (a
// non-negative float orders as its bits), complemented for decreasing, above the index; a
// comparison that reads |w| through the indices cost gptq's first pass more than its updates.
template <typename F>
void for_each_prefix(const float* w, const float* a, int64_t n, F&& f) {
  thread_local std::vector<uint64_t> keys;
  keys.resize(size_t(n));
  for (int64_t j = 0; j < n; ++j) {
    const float m = std::fabs(w[j]);
    uint32_t bits;
    std::memcpy(&bits, &m, sizeof bits);
    keys[size_t(j)] = uint64_t(~bits) << 32 | uint64_t(j);
  }
  std::sort(keys.begin(), keys.end());
  double sa = 0.0, sb = 0.0;
  for (const uint64_t key : keys) {
    const int64_t j = int64_t(key & 0xffffffffu);
    const double aj = importance(a, j);
    sa += aj * std::fabs(double(w[j]));
    sb += aj;
    if (sb > 0.0) f(sa, sb);
  }
}

// A group with no nonzero code stores d = 0 (its decoded max is then the stored scale).
uint16_t zero_if_no_code(const int8_t* codes, int64_t n, uint16_t d) {
  for (int64_t j = 0; j < n; ++j)
    if (codes[j] != 0) return d;
  return 0;
}

}  // namespace

const float* effective_importance(const float* a, int64_t n) {
  if (!a) return nullptr;
  for (int64_t j = 0; j < n; ++j)
    if (a[j] > 0.0f) return a;
  return nullptr;
}

void codes_for_scale(const float* w, int64_t n, float d, int8_t* codes) {
  for (int64_t j = 0; j < n; ++j) codes[j] = code_for_scale(w[j], d);
}

double weighted_error(const float* w, const float* a, int64_t n, const int8_t* codes, float d) {
  double e = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double r = double(w[j]) - double(d) * codes[j];
    e += importance(a, j) * r * r;
  }
  return e;
}

uint16_t fit_rtn(const float* w, int64_t n, int8_t* codes) {
  // Exactly the reference encoder's arithmetic (float32 d, its reciprocal, lroundf), so that the
  // packed result is byte-identical to traits(PTQ1_0).from_float.
  float amax = 0.0f;
  for (int64_t j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(w[j]));
  const float id = amax != 0.0f ? 1.0f / amax : 0.0f;
  for (int64_t j = 0; j < n; ++j) codes[j] = int8_t(std::clamp(int(std::lroundf(w[j] * id)), -1, 1));
  return f32_to_fp16(amax);
}

uint16_t fit_absmean(const float* w, int64_t n, int8_t* codes) {
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::fabs(double(w[j]));
  const double delta = 0.7 * sum / double(n);
  double kept_sum = 0.0;
  int64_t kept = 0;
  for (int64_t j = 0; j < n; ++j)
    if (std::fabs(double(w[j])) > delta) {
      kept_sum += std::fabs(double(w[j]));
      ++kept;
    }
  const uint16_t d = kept ? f32_to_fp16(float(kept_sum / double(kept))) : uint16_t{0};
  for (int64_t j = 0; j < n; ++j)
    codes[j] = d != 0 && std::fabs(double(w[j])) > delta ? (w[j] > 0.0f ? int8_t{1} : int8_t{-1}) : int8_t{0};
  return zero_if_no_code(codes, n, d);
}

uint16_t fit_optimal(const float* w, const float* a, int64_t n, int8_t* codes) {
  a = effective_importance(a, n);
  const double total = weighted_energy(w, a, n);
  double best = total;  // d = 0, every code 0
  uint16_t best_d = 0;
  for_each_prefix(w, a, n, [&](double sa, double sb) {
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

double optimal_real_scale(const float* w, const float* a, int64_t n, double* err) {
  a = effective_importance(a, n);
  const double total = weighted_energy(w, a, n);
  double best = total, best_s = 0.0;
  for_each_prefix(w, a, n, [&](double sa, double sb) {
    const double e = total - sa * sa / sb;
    if (e < best) {
      best = e;
      best_s = sa / sb;
    }
  });
  if (err) *err = best;
  return best_s;
}

}  // namespace bonsai::quant
