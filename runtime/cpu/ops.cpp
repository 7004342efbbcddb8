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
  // A vector max: std::max_element compiled to a scalar loop through a stack slot, which took most
  // of a decode step's softmax (docs/benchmarks.md, "Decode attention on AVX-512").
  float mx = x[0];
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  BONSAI_EXPF_LOOP
  for (int64_t i = 0; i < n; ++i) x[i] = expf(x[i] - mx);
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float inv = float(1.0 / sum);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

BONSAI_CPU_CLONES void logsumexp(const float* x, int64_t n, float* mx_out, double* lse) {
  float mx = x[0];
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  BONSAI_EXPF_LOOP
  for (int64_t i = 0; i < n; ++i) sum += double(expf(x[i] - mx));
  *mx_out = mx;
  *lse = std::log(sum);
}

BONSAI_CPU_CLONES void kl_codes(const uint16_t* code, int64_t n, float lmax, float step, const float* x, double q_off,
                                float* work, double* kl_out, double* abs_out) {
  double z = 0.0;
  BONSAI_EXPF_LOOP
  for (int64_t i = 0; i < n; ++i) {
    work[i] = expf(lmax - float(code[i]) * step);
    z += double(work[i]);
  }
  const double log_z = std::log(z), inv_z = 1.0 / z;
  // log p_v - log q_v = off - code_v * step - x_v, in double: the terms are tens of nats and
  // their difference a few thousandths.
  const double off = double(lmax) - log_z + q_off, st = double(step);
  double kl = 0.0, abs = 0.0;
#pragma omp simd reduction(+ : kl, abs)
  for (int64_t i = 0; i < n; ++i) {
    const double t = off - double(code[i]) * st - double(x[i]);
    const double p = double(work[i]) * inv_z;
    kl += p * t;
    abs += p * std::fabs(t);
  }
  *kl_out = kl;
  *abs_out = abs;
}

namespace {

// Asks for the n floats at p (their cache lines) ahead of use; past a cache's end it reads a few
// KB of its arena in vain, and a prefetch cannot fault.
inline void ahead(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(p + i);
}

}  // namespace

BONSAI_CPU_CLONES void attend(const float* q, int64_t g, const float* k, const float* v, int64_t seen,
                              int64_t head_dim, float scale, float* score, float* out) {
  // The first kAttendAhead rows of K and V are asked for at once: the loops below ask only for rows
  // kAttendAhead on, and in a decode step both come from memory (~8% less attention time at ctx ~64,
  // docs/benchmarks.md, "Decode attention asks for its first rows").
  const int64_t d = head_dim;
  ahead(k, std::min(seen, kAttendAhead) * d);
  ahead(v, std::min(seen, kAttendAhead) * d);
  // Four cached rows per pass, so that each head keeps four sums in flight; then one at a time.
  int64_t j = 0;
  for (; j + 4 <= seen; j += 4) {
    const float* kj = k + j * d;
    ahead(kj + kAttendAhead * d, 4 * d);
    for (int64_t h = 0; h < g; ++h) {
      const float* qh = q + h * d;
      float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (int64_t i = 0; i < d; ++i) {
        s0 += kj[i] * qh[i];
        s1 += kj[d + i] * qh[i];
        s2 += kj[2 * d + i] * qh[i];
        s3 += kj[3 * d + i] * qh[i];
      }
      float* sh = score + h * seen + j;
      sh[0] = s0 * scale, sh[1] = s1 * scale, sh[2] = s2 * scale, sh[3] = s3 * scale;
    }
  }
  for (; j < seen; ++j)
    for (int64_t h = 0; h < g; ++h) {
      const float *kj = k + j * d, *qh = q + h * d;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < d; ++i) s += kj[i] * qh[i];
      score[h * seen + j] = s * scale;
    }
  for (int64_t h = 0; h < g; ++h) softmax(score + h * seen, seen);
  std::fill(out, out + g * d, 0.0f);
  for (j = 0; j + 4 <= seen; j += 4) {
    const float* vj = v + j * d;
    ahead(vj + kAttendAhead * d, 4 * d);
    for (int64_t h = 0; h < g; ++h) {
      const float* p = score + h * seen + j;
      float* oh = out + h * d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) oh[i] += p[0] * vj[i] + p[1] * vj[d + i] + p[2] * vj[2 * d + i] + p[3] * vj[3 * d + i];
    }
  }
  for (; j < seen; ++j)
    for (int64_t h = 0; h < g; ++h) {
      const float* vj = v + j * d;
      const float p = score[h * seen + j];
      float* oh = out + h * d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) oh[i] += p * vj[i];
    }
}

BONSAI_CPU_CLONES void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  BONSAI_EXPF_LOOP
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

}  // namespace bonsai::cpu
