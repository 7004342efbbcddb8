// The small element-wise steps of a decoder forward pass on the CPU, next to the matmuls. Plain
// loops: they touch n floats per token where a matmul touches the whole weight matrix.
#pragma once
#include <cstdint>

namespace bonsai::cpu {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] (RMSNorm; sum of squares in double, as ggml's
// rms_norm). w may be null (no gain); y may be x.
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);

// In place: x[i] = exp(x[i] - max) / sum_j exp(x[j] - max) (sum in double). -inf entries (masked
// positions) become 0; n must be > 0 with at least one finite entry for a meaningful result.
void softmax(float* x, int64_t n);

// The terms of log-softmax over n logits: *mx = max x, *lse = log sum exp(x - mx) (expf summed in
// double), so log p_i = x_i - mx - lse. For perplexity and KL divergence over a whole vocabulary.
void logsumexp(const float* x, int64_t n, float* mx, double* lse);

// A 16-bit log-probability vector against logits (runtime/kld.h's every-token layout): with
// l_v = lmax - code[v] * step renormalised to log p_v = l_v - log sum exp(l), and log q_v = x_v -
// q_off, *kl = sum p_v (log p_v - log q_v) and *abs = sum p_v |log p_v - log q_v|. work: n floats.
void kl_codes(const uint16_t* code, int64_t n, float lmax, float step, const float* x, double q_off, float* work,
              double* kl, double* abs);

// attend asks for the cached rows this many rows ahead of those it reads (and for the first this
// many at once): in a decode step the cache comes from memory, and on the 2-core Zen 5 the
// hardware prefetchers alone left long-context generation at 47 t/s, with these 54-59
// (docs/benchmarks.md, "Decode attention by cache head"). kernels_avx512.h's attend does the same.
constexpr int64_t kAttendAhead = 16;

// Attention of g query heads (q: g rows of head_dim floats) that share one key/value head over
// its `seen` cached positions (k, v: seen contiguous rows of head_dim): for each head, score[j] =
// scale * k_j . q, softmax over j, out = sum_j score[j] * v_j (out: g rows of head_dim). score
// holds g * seen floats of scratch. The g heads read each cached row once, four rows at a time.
// These plain loops are bound by their arithmetic, not by the cache they read (horizontal sums,
// output rows reloaded): on the avx512 path attention.cpp takes kernels_avx512.h's attend instead
// (docs/benchmarks.md, "Decode attention on AVX-512").
void attend(const float* q, int64_t g, const float* k, const float* v, int64_t seen, int64_t head_dim, float scale,
            float* score, float* out);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)) (the SwiGLU feed-forward gate).
// out may be gate or up.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace bonsai::cpu
