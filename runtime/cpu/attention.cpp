#include "runtime/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/matmul.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/parallel.h"

#if BONSAI_CPU_AVX2
#include "runtime/cpu/kernels_avx512.h"
#endif

namespace bonsai::cpu {
namespace {

// A prompt's attention is two matrix products per head (Q·Kᵀ, then P·V): from this many tokens
// on they run as SGEMMs over chunks of kChunk query rows, each chunk reading only the cache rows
// its last token may see, so the causal mask wastes at most one chunk's triangle. One head and
// chunk is one SGEMM pair on one thread of the team (whose threads OpenBLAS keeps to themselves).
constexpr int64_t kChunk = 64;

void attention_gemm(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0,
                    int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t ctx, float scale, float* out) {
  const int64_t group = n_head / n_head_kv, q_dim = n_head * head_dim;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  thread_local std::vector<float> p;  // each thread's scores, kept for the next call
  parallel_dynamic(n_head * chunks, true, [&](int64_t hc) {
    const int64_t h = hc / chunks, c = hc % chunks;
    const int64_t t0 = c * kChunk, nt = std::min(kChunk, n - t0), span = pos0 + t0 + nt;
    const float* qh = q + t0 * q_dim + h * head_dim;
    const float* kh = k_cache + (h / group) * ctx * head_dim;
    const float* vh = v_cache + (h / group) * ctx * head_dim;
    p.resize(size_t(nt * span));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(nt), int(span), int(head_dim), scale, qh, int(q_dim), kh,
                int(head_dim), 0.0f, p.data(), int(span));
    for (int64_t t = 0; t < nt; ++t) {
      float* row = p.data() + t * span;
      const int64_t seen = pos0 + t0 + t + 1;
      softmax(row, seen);
      std::fill(row + seen, row + span, 0.0f);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(nt), int(head_dim), int(span), 1.0f, p.data(), int(span),
                vh, int(head_dim), 0.0f, out + t0 * q_dim + h * head_dim, int(q_dim));
  });
}

}  // namespace

void attention(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, int64_t ctx, float* out) {
  const float scale = 1.0f / std::sqrt(float(head_dim));
  if (n >= kGemmTokens)
    return attention_gemm(q, k_cache, v_cache, n, pos0, n_head, n_head_kv, head_dim, ctx, scale, out);
  const int64_t group = n_head / n_head_kv, stride = ctx * head_dim;  // from one cache head to the next
  auto* kernel = &attend;  // ops.h's loops, or AVX-512's where the path (matmul.h) and the head size allow
#if BONSAI_CPU_AVX2
  if (matmul_path_taken() == MatmulPath::avx512 && avx512::attend_takes(head_dim)) kernel = &avx512::attend;
#endif
  // Both threads from the first position on: in a decode step the cache comes from memory (the
  // weights streamed since evicted it), and a lone thread below 32 positions made tg128 1-2%
  // slower than two (docs/benchmarks.md).
  thread_local std::vector<float> score;  // each thread's scratch: no allocation per call once warm
  parallel_dynamic(n * n_head_kv, true, [&](int64_t th) {
    const int64_t t = th / n_head_kv, h = th % n_head_kv;
    score.resize(size_t(group * (pos0 + t + 1)));
    kernel(q + (t * n_head + h * group) * head_dim, group, k_cache + h * stride, v_cache + h * stride, pos0 + t + 1,
           head_dim, scale, score.data(), out + (t * n_head + h * group) * head_dim);
  });
}

}  // namespace bonsai::cpu
