// The small interface a compute backend implements. The transformer (transformer.cpp) is written
// once against it; cpu/ and cuda/ implement the operations on their own memory. Activations are
// float32, row-major [n rows][width]; weights are formats' Tensors in their stored types.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/residual.h"
#include "formats/tensor_set.h"
#include "runtime/hadamard.h"

namespace bonsai {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Backend memory for n floats, zeroed, owned by the backend until it is destroyed.
  virtual float* alloc(int64_t n) = 0;
  virtual void to_host(const float* src, float* dst, int64_t n) = 0;
  virtual void from_host(const float* src, float* dst, int64_t n) = 0;  // dst: backend memory
  // Whether backend memory is host memory (the CPU): host buffers may then be passed directly.
  virtual bool host_memory() const { return false; }
  // The native queue this backend's work is ordered on (CUDA: its cudaStream_t), for code that
  // adds its own device work to the same order (calibrate/cuda's statistics); null on the CPU.
  virtual void* native_stream() const { return nullptr; }

  // out[i] = row ids[i] of the table, decoded to float (ids are host memory).
  virtual void embed(const Tensor& table, const int32_t* ids, int64_t n, float* out) = 0;
  // y[t][r] = sum_k W[r][k] x[t][k] for t < n.
  virtual void matmul(const Tensor& w, const float* x, int64_t n, float* y) = 0;
  // matmul of count weights that read the same x (q/k/v, gate/up): y[i] = w[i] x, as count matmul
  // calls give, so that a backend may prepare the input once and run all of them in one pass. The
  // default makes the count calls.
  virtual void matmul_shared(const Tensor* const* w, float* const* y, int count, const float* x, int64_t n);
  // y[t][r] += (R̂ x_t)[r]: a weight's residual codebooks (formats/residual.h), after its matmul.
  // The default refuses (Error naming the backend and tensor): a backend without the kernels.
  virtual void matmul_residual(const ResidualView& r, const float* x, int64_t n, float* y);
  // y = x / rms(x) * weight, per row of width dim (in place allowed).
  virtual void rmsnorm(const float* x, const std::vector<float>& weight, int64_t rows, int64_t dim, float eps,
                       float* y) = 0;
  virtual void add_bias(float* y, const std::vector<float>& bias, int64_t rows) = 0;
  // Rotary embedding of n tokens at positions pos0.., n_heads heads of head_dim, first n_rot dims.
  virtual void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0,
                    float base, bool neox) = 0;
  // One layer's K or V cache for n_ctx positions of n_head_kv heads × head_dim values, zeroed,
  // in the backend's type and layout (the CPU: float, each head's positions contiguous; CUDA:
  // fp16, position by position); only store_kv and attention read or write it.
  virtual void* alloc_kv(int64_t n_ctx, int64_t n_head_kv, int64_t head_dim) = 0;
  // Cache positions [row0, row0 + n) <- src (n rows of dim = n_head_kv × head_dim floats).
  virtual void store_kv(const float* src, void* cache, int64_t row0, int64_t n, int64_t dim) = 0;
  // Causal attention of n query tokens at positions pos0.. over the cache rows 0..pos0+n-1.
  virtual void attention(const float* q, const void* k_cache, const void* v_cache, int64_t n, int64_t pos0,
                         int64_t n_head, int64_t n_head_kv, int64_t head_dim, float* out) = 0;
  virtual void copy(const float* src, float* dst, int64_t n) = 0;
  virtual void add(float* x, const float* y, int64_t n) = 0;        // x += y
  virtual void silu_mul(float* g, const float* u, int64_t n) = 0;  // g = silu(g) * u
  virtual void hadamard(const HadamardSpec& spec, float* x, int64_t n, int64_t k, bool inverse) = 0;

  // The calls between begin_step and end_step are one forward step of n tokens at positions
  // pos0..; every position argument inside it is pos0 plus an offset that depends only on the
  // step's shape, so a backend may record a step once and replay it (CUDA graphs for decode).
  // Results reach the host only through to_host, after end_step.
  virtual void begin_step(int64_t /*pos0*/, int64_t /*n*/) {}
  virtual void end_step() {}

  // The memory-read bandwidth this backend's weights stream from (GB/s), measured now: the
  // roofline that generation speed is judged against.
  virtual double measure_bandwidth_gbs() = 0;
  // Host memory that measure_bandwidth_gbs keeps resident for its next probes (the CPU's buffer,
  // far larger than the caches): counted in the process's RSS, which bench reports without it.
  virtual uint64_t probe_resident_bytes() const { return 0; }
  // The bytes a product with w reads from memory: w's own, unless the backend has made a copy of
  // it for its kernels in another layout (the CPU's PQ2_0 copy of PTQ1_0 on AVX2 is 34/28 of it).
  virtual uint64_t read_bytes(const Tensor& w) { return w.nbytes; }
};

// "cpu" (always), "cuda[:N]" when built with CUDA; Error for anything else.
std::unique_ptr<Backend> make_backend(const std::string& device, int threads);

}  // namespace bonsai
