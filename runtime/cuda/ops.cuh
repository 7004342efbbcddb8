// The transformer's other operations on the GPU (float32 activations, fp16 KV cache), each the
// same arithmetic as the CPU backend's (runtime/backend_cpu.cpp, runtime/cpu/ops.cpp). Positions
// are *pos + rel: pos is the step's position in device memory (see launcher.cuh).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "runtime/cuda/launcher.cuh"

namespace bonsai::cuda {

void set_pos(cudaStream_t s, int* pos, int64_t value);
// w may be null (weight 1).
void rmsnorm(Launcher& l, const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y);
void add_bias(Launcher& l, float* y, const float* bias, int64_t rows, int64_t dim);
void rope(Launcher& l, float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t n_rot, const int* pos,
          int64_t rel, float base, bool neox);
void store_kv(Launcher& l, const float* src, half* cache, const int* pos, int64_t rel, int64_t n, int64_t dim);
// head_dim <= 256.
void attention(Launcher& l, const float* q, const half* k, const half* v, int64_t n, const int* pos, int64_t rel,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, float* out);
void copy(Launcher& l, const float* src, float* dst, int64_t n);
void add(Launcher& l, float* x, const float* y, int64_t n);
void silu_mul(Launcher& l, float* g, const float* u, int64_t n);
// Per row of width k: x <- H_B(s ⊙ x) (inverse: s ⊙ H_B x); signs may be null; B <= 4096.
void hadamard(Launcher& l, float* x, int64_t n, int64_t k, int64_t block, const float* signs, bool inverse);
// Read bandwidth of device memory in GB/s: the best of several passes over `bytes` bytes.
double read_bandwidth_gbs(size_t bytes);

}  // namespace bonsai::cuda
