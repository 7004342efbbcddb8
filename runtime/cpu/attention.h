// Causal multi-head attention over a float KV cache (grouped-query: n_head / n_head_kv query heads
// share a cache head), the CPU backend's one definition of it.
#pragma once
#include <cstdint>

namespace bonsai::cpu {

// q: n tokens × n_head × head_dim (RoPE applied); k_cache, v_cache: n_head_kv heads of ctx
// positions of head_dim (head h's position j at (h * ctx + j) * head_dim), position pos0 + t
// holding token t; ctx >= pos0 + n. Token t attends to positions 0 .. pos0 + t.
// out: n × n_head × head_dim. Scores are scaled by 1/sqrt(head_dim). Threads: the
// runtime's team (parallel.h), over tokens and cache heads, or from kGemmTokens tokens on over heads
// and chunks of query rows (SGEMMs).
void attention(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, int64_t ctx, float* out);

}  // namespace bonsai::cpu
