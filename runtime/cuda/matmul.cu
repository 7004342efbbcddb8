#include "runtime/cuda/matmul.cuh"

#include <mma.h>

#include <cstring>
#include <string>

#include "runtime/cuda/warp.cuh"
#include "runtime/cuda/weight_types.cuh"

namespace bonsai::cuda {

ActScratch::~ActScratch() {
  for (void* p : retired_) cudaFree(p);
  if (buf_) cudaFree(buf_);
}

void* ActScratch::get(size_t bytes) {
  if (bytes > size_) {
    if (buf_) retired_.push_back(buf_);
    buf_ = nullptr;
    BONSAI_CUDA_CHECK(cudaMalloc(&buf_, bytes));
    size_ = bytes;
  }
  return buf_;
}

namespace {

constexpr int kMaxVecTokens = 8;


// ---- n <= 8, quantized: int8 activations in code-byte order, lookup table, dp4a ----

// xq: per token t and weight block b, kBytes slots of 8 int8 (slot = code byte, lane = digit);
// dx[t*nb + b] its scale. Grid (nb, n), 128 threads.
template <typename W>
__global__ void quantize_act(const float* x, int64_t cols, int nb, int2* xq, float* dx) {
  using V = typename W::View;
  const int b = blockIdx.x, t = blockIdx.y;
  const float* xb = x + int64_t(t) * cols + int64_t(b) * V::kElems;
  float m = 0.0f;
  for (int j = threadIdx.x; j < V::kElems; j += blockDim.x) m = fmaxf(m, fabsf(xb[j]));
  __shared__ float part[4];
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = m;
  __syncthreads();
  m = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
  const float d = m / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
  auto* q = reinterpret_cast<int8_t*>(xq + (int64_t(t) * nb + b) * V::kBytes);
  for (int s = threadIdx.x; s < V::kBytes * 8; s += blockDim.x) q[s] = 0;
  __syncthreads();
  for (int j = threadIdx.x; j < V::kElems; j += blockDim.x) {
    int byte = 0, digit = 0;
    V::place(j, byte, digit);
    q[byte * 8 + digit] = int8_t(__float2int_rn(xb[j] * id));
  }
  if (threadIdx.x == 0) dx[int64_t(t) * nb + b] = d;
}

// One warp a row; lanes walk the row's (block, code byte) pairs. 256 threads = 8 rows a block.
template <typename W, int NT>
__global__ void matvec_lut(const uint8_t* w, int64_t row_bytes, int rows, int nb, const int2* xq, const float* dx,
                           int ntok, float* y) {
  using V = typename W::View;
  using B = typename W::B;
  __shared__ int2 lut[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    int8_t v[8];
    for (int n = 0; n < 8; ++n) v[n] = n < V::kDigits ? int8_t(V::value(uint8_t(i), n)) : int8_t(0);
    int2 p;
    memcpy(&p, v, 8);
    lut[i] = p;
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const B* row = reinterpret_cast<const B*>(w + int64_t(r) * row_bytes);
  float acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  const int total = nb * V::kBytes;
#pragma unroll 4
  for (int f = lane; f < total; f += 32) {
    const int b = f / V::kBytes, byte = f - b * V::kBytes;
    const B& blk = row[b];
    const int2 c = lut[V::bytes(blk)[byte]];
    const float d = V::scale(blk);
    for (int t = 0; t < NT; ++t) {
      if (t >= ntok) break;
      const int64_t slot = (int64_t(t) * nb + b);
      const int2 xv = xq[slot * V::kBytes + byte];
      const int s = __dp4a(c.y, xv.y, __dp4a(c.x, xv.x, 0));
      acc[t] += float(s) * (d * dx[slot]);
    }
  }
  for (int t = 0; t < NT && t < ntok; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[int64_t(t) * rows + r] = s;
  }
}

// ---- n <= 8, float weights ----

template <typename W, int NT>
__global__ void matvec_fma(const uint8_t* w, int64_t row_bytes, int rows, int64_t cols, const float* x, int ntok,
                           float* y) {
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const uint8_t* row = w + int64_t(r) * row_bytes;
  float acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
#pragma unroll 4
  for (int64_t k = lane; k < cols; k += 32) {
    const float v = W::at(row, k);
    for (int t = 0; t < NT; ++t) {
      if (t >= ntok) break;
      acc[t] += v * x[int64_t(t) * cols + k];
    }
  }
  for (int t = 0; t < NT && t < ntok; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[int64_t(t) * rows + r] = s;
  }
}

// ---- n > 8: tensor cores on decoded tiles ----

constexpr int kTm = 64, kTn = 64, kTk = 32, kPad = 8;

// Block (rows r0.., tokens t0..): 4 warps, each 32 x 32 of the 64 x 64 output tile.
template <typename W>
__global__ void matmul_wmma(const uint8_t* w, int64_t row_bytes, int rows, int64_t cols, const float* x, int n,
                            float* y) {
  using namespace nvcuda;
  __shared__ __align__(32) half as[kTm][kTk + kPad];
  __shared__ __align__(32) half bs[kTn][kTk + kPad];
  __shared__ __align__(32) float cs[kTm][kTn + 4];
  const int r0 = blockIdx.x * kTm, t0 = blockIdx.y * kTn;
  const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(c[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < cols; k0 += kTk) {
    for (int i = threadIdx.x; i < kTm * kTk; i += blockDim.x) {
      const int rr = i / kTk, kk = i % kTk;
      const int64_t k = k0 + kk;
      const int r = r0 + rr, t = t0 + rr;
      as[rr][kk] = __float2half(r < rows && k < cols ? W::at(w + int64_t(r) * row_bytes, k) : 0.0f);
      bs[rr][kk] = __float2half(t < n && k < cols ? x[int64_t(t) * cols + k] : 0.0f);
    }
    __syncthreads();
    for (int kk = 0; kk < kTk; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &as[wm * 32 + i * 16][kk], kTk + kPad);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &bs[wn * 32 + j * 16][kk], kTk + kPad);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(c[i][j], a[i], b[j], c[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&cs[wm * 32 + i * 16][wn * 32 + j * 16], c[i][j], kTn + 4, wmma::mem_row_major);
  __syncthreads();
  for (int i = threadIdx.x; i < kTm * kTn; i += blockDim.x) {
    const int tt = i / kTm, rr = i % kTm;  // consecutive threads write consecutive rows of y
    if (r0 + rr < rows && t0 + tt < n) y[int64_t(t0 + tt) * rows + r0 + rr] = cs[rr][tt];
  }
}

template <typename W>
__global__ void get_rows_kernel(const uint8_t* w, int64_t row_bytes, int64_t cols, const int32_t* ids, float* out) {
  const int i = blockIdx.y;
  const uint8_t* row = w + int64_t(ids[i]) * row_bytes;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < cols; k += int64_t(gridDim.x) * blockDim.x)
    out[int64_t(i) * cols + k] = W::at(row, k);
}

int blocks_for(int64_t rows, int per_block) { return int((rows + per_block - 1) / per_block); }

template <typename W>
void run_lut(Launcher& launch, const DeviceMatrix& m, const float* x, int64_t n, float* y, ActScratch& scratch) {
  using V = typename W::View;
  const int nb = int(m.cols / V::kElems);
  const size_t q_bytes = size_t(n) * nb * V::kBytes * sizeof(int2);
  auto* base = static_cast<char*>(scratch.get(q_bytes + size_t(n) * nb * sizeof(float)));
  auto* xq = reinterpret_cast<int2*>(base);
  auto* dx = reinterpret_cast<float*>(base + q_bytes);
  launch(quantize_act<W>, dim3(unsigned(nb), unsigned(n)), dim3(128), 0, x, m.cols, nb, xq, dx);
  const dim3 grid(unsigned(blocks_for(m.rows, 8)));
  if (n == 1)
    launch(matvec_lut<W, 1>, grid, dim3(256), 0, m.data, m.row_bytes, int(m.rows), nb, xq, dx, int(n), y);
  else
    launch(matvec_lut<W, kMaxVecTokens>, grid, dim3(256), 0, m.data, m.row_bytes, int(m.rows), nb, xq, dx, int(n), y);
}

template <typename W>
void run_fma(Launcher& launch, const DeviceMatrix& m, const float* x, int64_t n, float* y) {
  const dim3 grid(unsigned(blocks_for(m.rows, 8)));
  if (n == 1)
    launch(matvec_fma<W, 1>, grid, dim3(256), 0, m.data, m.row_bytes, int(m.rows), m.cols, x, int(n), y);
  else
    launch(matvec_fma<W, kMaxVecTokens>, grid, dim3(256), 0, m.data, m.row_bytes, int(m.rows), m.cols, x, int(n), y);
}

template <typename W>
void run_wmma(Launcher& launch, const DeviceMatrix& m, const float* x, int64_t n, float* y) {
  const dim3 grid(unsigned(blocks_for(m.rows, kTm)), unsigned(blocks_for(n, kTn)));
  launch(matmul_wmma<W>, grid, dim3(128), 0, m.data, m.row_bytes, int(m.rows), m.cols, x, int(n), y);
}

void check_shape(const DeviceMatrix& m, int64_t n) {
  if (m.rows <= 0 || m.cols <= 0 || n <= 0 || m.rows > INT32_MAX || n > INT32_MAX)
    throw Error(cat("CUDA matmul: bad shape (", m.rows, " rows, ", m.cols, " columns, ", n, " tokens)"));
}

}  // namespace

void matmul_path(Launcher& launch, const char* path, const DeviceMatrix& m, const float* x, int64_t n, float* y,
                 ActScratch& scratch) {
  check_shape(m, n);
  const std::string p = path;
  with_weight_type(m.type, [&](auto tag) {
    using W = decltype(tag);
    if (p == "wmma") return run_wmma<W>(launch, m, x, n, y);
    if (n > kMaxVecTokens) throw Error(cat("CUDA matmul path '", p, "' takes at most ", kMaxVecTokens, " tokens"));
    if constexpr (W::kQuant) {
      if (p == "lut") return run_lut<W>(launch, m, x, n, y, scratch);
    } else {
      if (p == "fma") return run_fma<W>(launch, m, x, n, y);
    }
    throw Error(cat("CUDA matmul: no path '", p, "' for ", traits(m.type).name));
  });
}

void matmul(Launcher& launch, const DeviceMatrix& m, const float* x, int64_t n, float* y, ActScratch& scratch) {
  const bool quant = traits(m.type).block_elems > 1;
  matmul_path(launch, n > kMaxVecTokens ? "wmma" : quant ? "lut" : "fma", m, x, n, y, scratch);
}

void get_rows(Launcher& launch, const DeviceMatrix& m, const int32_t* ids, int64_t n, float* out) {
  with_weight_type(m.type, [&](auto tag) {
    using W = decltype(tag);
    const unsigned gx = unsigned(std::min<int64_t>((m.cols + 255) / 256, 64));
    launch(get_rows_kernel<W>, dim3(gx, unsigned(n)), dim3(256), 0, m.data, m.row_bytes, m.cols, ids, out);
  });
}

}  // namespace bonsai::cuda
