#include "quantize/group_fit.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/fp16.h"
#include "quantize/group_rules.h"

namespace bonsai::quant {
namespace {

// The support search's order (rules::magnitude_key), sorted, in this thread's buffer. Sorting
// the keys themselves: a comparison that reads |w| through the indices cost gptq's first pass more
// than its updates.
const uint64_t* sorted_keys(const float* w, int64_t n) {
  thread_local std::vector<uint64_t> keys;
  keys.resize(size_t(n));
  for (int64_t j = 0; j < n; ++j) keys[size_t(j)] = rules::magnitude_key(w[j], j);
  std::sort(keys.begin(), keys.end());
  return keys.data();
}

}  // namespace

const float* effective_importance(const float* a, int64_t n) { return rules::effective_importance(a, n); }

void codes_for_scale(const float* w, int64_t n, float d, int8_t* codes) { rules::codes_for_scale(w, n, d, codes); }

double weighted_error(const float* w, const float* a, int64_t n, const int8_t* codes, float d) {
  return rules::weighted_error(w, a, n, codes, d);
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
  return rules::zero_if_no_code(codes, n, d);
}

uint16_t fit_optimal(const float* w, const float* a, int64_t n, int8_t* codes) {
  return rules::fit_optimal_sorted(w, a, n, sorted_keys(w, n), codes);
}

double optimal_real_scale(const float* w, const float* a, int64_t n, double* err) {
  a = effective_importance(a, n);
  const double total = rules::weighted_energy(w, a, n);
  double best = total, best_s = 0.0;
  rules::for_each_sorted_prefix(w, a, n, sorted_keys(w, n), [&](double sa, double sb) {
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
