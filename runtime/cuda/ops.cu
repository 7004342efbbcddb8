#include "runtime/cuda/ops.cuh"
#include "runtime/cuda/warp.cuh"

#include <algorithm>
#include <cmath>

namespace bonsai::cuda {
namespace {

constexpr int kThreads = 256;
unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }


__global__ void set_pos_kernel(int* pos, int value) { *pos = value; }

// One block a row (up to 1024 threads: a decode step normalizes one long row); the sum of
// squares in double, as the CPU's rmsnorm.
__global__ void rmsnorm_kernel(const float* x, const float* w, int64_t dim, float eps, float* y) {
  const float* xr = x + int64_t(blockIdx.x) * dim;
  float* yr = y + int64_t(blockIdx.x) * dim;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += double(xr[i]) * xr[i];
  __shared__ double part[32];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < int(blockDim.x / 32); ++i) total += part[i];
  const float scale = float(1.0 / sqrt(total / double(dim) + double(eps)));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * scale * (w ? w[i] : 1.0f);
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t rows, int64_t dim) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * dim; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += b[i % dim];
}

// One thread per (token, head, pair); angles in double, as the CPU computes them.
__global__ void rope_kernel(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t n_rot, const int* pos,
                            int64_t rel, float base, bool neox) {
  const int64_t half_rot = n_rot / 2, total = n * n_heads * half_rot;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half_rot, th = idx / half_rot, t = th / n_heads;
    const double theta = double(*pos + rel + t) * pow(double(base), -2.0 * double(i) / double(n_rot));
    const float c = float(cos(theta)), s = float(sin(theta));
    float* v = x + th * head_dim;
    const int64_t a = neox ? i : 2 * i, b = neox ? i + half_rot : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

__global__ void store_kv_kernel(const float* src, half* cache, const int* pos, int64_t rel, int64_t count, int64_t dim) {
  half* dst = cache + (int64_t(*pos) + rel) * dim;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2half(src[i]);
}

constexpr int kAttnWarps = 8, kMaxHeadDim = 256, kPerLane = kMaxHeadDim / 32;

// Block (head h, token t): the warps split the positions 0..last, each keeping an online softmax
// (running max m, sum l, output o); the block then merges the warps' partial results.
__global__ void attention_kernel(const float* q, const half* kc, const half* vc, const int* pos, int64_t rel,
                                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float* out) {
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kv_dim = n_head_kv * head_dim, kvh = h / (n_head / n_head_kv);
  const int64_t last = int64_t(*pos) + rel + t;
  const float scale = 1.0f / sqrtf(float(head_dim));
  const float* qv = q + (t * n_head + h) * head_dim;
  float qr[kPerLane], o[kPerLane];
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    qr[i] = d < head_dim ? qv[d] : 0.0f;
    o[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = warp; j <= last; j += kAttnWarps) {
    const half* kr = kc + j * kv_dim + kvh * head_dim;
    float s = 0.0f;
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < head_dim) s += qr[i] * __half2float(kr[d]);
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    const half* vr = vc + j * kv_dim + kvh * head_dim;
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < head_dim) o[i] = o[i] * corr + p * __half2float(vr[d]);
    }
    m = m_new;
  }
  __shared__ float sm[kAttnWarps], sl[kAttnWarps], so[kAttnWarps][kMaxHeadDim];
  if (lane == 0) sm[warp] = m, sl[warp] = l;
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < head_dim) so[warp][d] = o[i];
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, sm[w]);
  float* dst = out + (t * n_head + h) * head_dim;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      if (sl[w] == 0.0f) continue;  // a warp that saw no position
      const float f = expf(sm[w] - mx);
      num += so[w][d] * f;
      den += sl[w] * f;
    }
    dst[d] = num / den;
  }
}

__global__ void copy_kernel(const float* src, float* dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}
__global__ void add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}
__global__ void silu_mul_kernel(float* g, const float* u, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = g[i];
    g[i] = v / (1.0f + expf(-v)) * u[i];
  }
}

// Block (run r of row t): the normalized fast Walsh–Hadamard transform of B values in shared
// memory, stage by stage as runtime/hadamard.cpp's fwht.
__global__ void hadamard_kernel(float* x, int64_t k, int64_t block, const float* signs, bool inverse) {
  extern __shared__ float v[];
  float* row = x + int64_t(blockIdx.y) * k + int64_t(blockIdx.x) * block;
  const float* sg = signs ? signs + int64_t(blockIdx.x) * block : nullptr;
  for (int64_t i = threadIdx.x; i < block; i += blockDim.x) v[i] = (sg && !inverse) ? row[i] * sg[i] : row[i];
  __syncthreads();
  for (int64_t h = 1; h < block; h *= 2) {
    for (int64_t p = threadIdx.x; p < block / 2; p += blockDim.x) {
      const int64_t j = (p / h) * 2 * h + p % h;
      const float a = v[j], c = v[j + h];
      v[j] = a + c;
      v[j + h] = a - c;
    }
    __syncthreads();
  }
  const float norm = 1.0f / sqrtf(float(block));
  for (int64_t i = threadIdx.x; i < block; i += blockDim.x) {
    const float r = v[i] * norm;
    row[i] = (sg && inverse) ? r * sg[i] : r;
  }
}

__global__ void read_kernel(const uint4* p, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; practically never taken
}

}  // namespace

void set_pos(cudaStream_t s, int* pos, int64_t value) {
  set_pos_kernel<<<1, 1, 0, s>>>(pos, int(value));
  BONSAI_CUDA_CHECK(cudaGetLastError());
}

void rmsnorm(Launcher& l, const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) {
  const unsigned threads = unsigned(std::clamp<int64_t>((dim / 4 + 31) / 32 * 32, 32, 1024));
  l(rmsnorm_kernel, dim3(unsigned(rows)), dim3(threads), 0, x, w, dim, eps, y);
}
void add_bias(Launcher& l, float* y, const float* bias, int64_t rows, int64_t dim) {
  l(add_bias_kernel, dim3(grid_for(rows * dim)), dim3(kThreads), 0, y, bias, rows, dim);
}
void rope(Launcher& l, float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t n_rot, const int* pos,
          int64_t rel, float base, bool neox) {
  l(rope_kernel, dim3(grid_for(n * n_heads * (n_rot / 2))), dim3(kThreads), 0, x, n, n_heads, head_dim, n_rot, pos,
    rel, base, neox);
}
void store_kv(Launcher& l, const float* src, half* cache, const int* pos, int64_t rel, int64_t n, int64_t dim) {
  l(store_kv_kernel, dim3(grid_for(n * dim)), dim3(kThreads), 0, src, cache, pos, rel, n * dim, dim);
}
void attention(Launcher& l, const float* q, const half* k, const half* v, int64_t n, const int* pos, int64_t rel,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, float* out) {
  if (head_dim > kMaxHeadDim) throw Error(cat("CUDA attention: head_dim ", head_dim, " > ", kMaxHeadDim));
  l(attention_kernel, dim3(unsigned(n_head), unsigned(n)), dim3(32 * kAttnWarps), 0, q, k, v, pos, rel, n_head,
    n_head_kv, head_dim, out);
}
void copy(Launcher& l, const float* src, float* dst, int64_t n) {
  l(copy_kernel, dim3(grid_for(n)), dim3(kThreads), 0, src, dst, n);
}
void add(Launcher& l, float* x, const float* y, int64_t n) { l(add_kernel, dim3(grid_for(n)), dim3(kThreads), 0, x, y, n); }
void silu_mul(Launcher& l, float* g, const float* u, int64_t n) {
  l(silu_mul_kernel, dim3(grid_for(n)), dim3(kThreads), 0, g, u, n);
}
void hadamard(Launcher& l, float* x, int64_t n, int64_t k, int64_t block, const float* signs, bool inverse) {
  if (block > 4096) throw Error(cat("CUDA hadamard: block size ", block, " > 4096"));
  l(hadamard_kernel, dim3(unsigned(k / block), unsigned(n)), dim3(unsigned(std::min<int64_t>(block, 512))),
    size_t(block) * sizeof(float), x, k, block, signs, inverse);
}

double read_bandwidth_gbs(size_t bytes) {
  void* buf = nullptr;
  unsigned* sink = nullptr;
  BONSAI_CUDA_CHECK(cudaMalloc(&buf, bytes));
  BONSAI_CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  BONSAI_CUDA_CHECK(cudaMemset(buf, 1, bytes));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t n = int64_t(bytes / sizeof(uint4));
  float best = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {  // the first pass warms up
    cudaEventRecord(a);
    read_kernel<<<unsigned(sms * 8), 512>>>(static_cast<const uint4*>(buf), n, sink);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (rep > 0) best = std::min(best, ms);
  }
  const cudaError_t e = cudaGetLastError();
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(buf);
  cudaFree(sink);
  BONSAI_CUDA_CHECK(e);
  return double(bytes) / (double(best) * 1e-3) / 1e9;
}

}  // namespace bonsai::cuda
