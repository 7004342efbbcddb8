#include "runtime/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/ops.h"
#include "runtime/cpu/parallel.h"

namespace bonsai::cpu {
namespace {

// A prompt's attention is two matrix products per head (Q·Kᵀ, then P·V): from this many tokens
// on they run as SGEMMs over chunks of kChunk query rows, each chunk reading only the cache rows
// its last token may see, so the causal mask wastes at most one chunk's triangle. One head and
// chunk is one SGEMM pair on one thread (OpenBLAS's OpenMP build stays on the calling thread).
constexpr int64_t kChunk = 64;

void attention_gemm(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0,
                    int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) {
  const int64_t group = n_head / n_head_kv, kv_dim = n_head_kv * head_dim, q_dim = n_head * head_dim;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel
  {
    std::vector<float> p(size_t(kChunk * (pos0 + n)));
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t t0 = c * kChunk, nt = std::min(kChunk, n - t0), span = pos0 + t0 + nt;
        const float* qh = q + t0 * q_dim + h * head_dim;
        const float* kh = k_cache + (h / group) * head_dim;
        const float* vh = v_cache + (h / group) * head_dim;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(nt), int(span), int(head_dim), scale, qh, int(q_dim),
                    kh, int(kv_dim), 0.0f, p.data(), int(span));
        for (int64_t t = 0; t < nt; ++t) {
          float* row = p.data() + t * span;
          const int64_t seen = pos0 + t0 + t + 1;
          softmax(row, seen);
          std::fill(row + seen, row + span, 0.0f);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(nt), int(head_dim), int(span), 1.0f, p.data(),
                    int(span), vh, int(kv_dim), 0.0f, out + t0 * q_dim + h * head_dim, int(q_dim));
      }
  }
}

}  // namespace

void attention(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, float* out) {
  const float scale = 1.0f / std::sqrt(float(head_dim));
  if (n >= kGemmTokens) return attention_gemm(q, k_cache, v_cache, n, pos0, n_head, n_head_kv, head_dim, scale, out);
  const int64_t group = n_head / n_head_kv, kv_dim = n_head_kv * head_dim;
#pragma omp parallel
  {
    std::vector<float> score(size_t(pos0 + n));
#pragma omp for collapse(2) schedule(dynamic, 4)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < n_head; ++h) {
        // Two matrix-vector products (OpenBLAS's vectorized sgemv, on this thread): the scores
        // K·q of the positions this token sees, then the output Vᵀ·softmax(scores).
        const int64_t kvh = h / group, seen = pos0 + t + 1;
        cblas_sgemv(CblasRowMajor, CblasNoTrans, int(seen), int(head_dim), scale, k_cache + kvh * head_dim, int(kv_dim),
                    q + (t * n_head + h) * head_dim, 1, 0.0f, score.data(), 1);
        softmax(score.data(), seen);
        cblas_sgemv(CblasRowMajor, CblasTrans, int(seen), int(head_dim), 1.0f, v_cache + kvh * head_dim, int(kv_dim),
                    score.data(), 1, 0.0f, out + (t * n_head + h) * head_dim, 1);
      }
  }
}

}  // namespace bonsai::cpu
