#include "runtime/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "runtime/cpu/simd.h"

namespace bonsai::cpu {

BONSAI_CPU_CLONES void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = float(1.0 / std::sqrt(ss / double(std::max<int64_t>(n, 1)) + double(eps)));
  if (w) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

BONSAI_CPU_CLONES void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  BONSAI_EXPF_LOOP
  for (int64_t i = 0; i < n; ++i) x[i] = expf(x[i] - mx);
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float inv = float(1.0 / sum);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

BONSAI_CPU_CLONES void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  BONSAI_EXPF_LOOP
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

}  // namespace bonsai::cpu
