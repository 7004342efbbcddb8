#include "runtime/cuda/matmul.cuh"

#include <mma.h>

#include <algorithm>
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

// ---- n <= 8, quantized: int8 activations laid out like the code words, dp4a ----
//
// A weight row is read as 32-bit words of code bytes (word w of a block: code bytes 4w..4w+3;
// PTQ1_0's last word also holds the scale, whose digits meet zero activations). digits4 turns a
// word into four small digits, one a byte, for each digit n; the activations are quantized to
// int8 per weight block and stored in the same shape, so that slot (w, n) holds, byte for byte,
// the activations of the elements those digits encode. One dp4a then multiplies four weights.
// value = kMul * digit + kOff, so a block's sum is kMul * sum(digit * a) + kOff * sum(a).

template <typename W>
struct ActShape {
  using V = typename W::View;
  static constexpr int kWords = (V::kBytes + 3) / 4;
  // Slots a word, padded so that a word's activations load as int2 or int4.
  static constexpr int kSlots = V::kDigits == 5 ? 6 : V::kDigits;
  static constexpr int kBlockInts = kWords * kSlots;
};

// xq: per token t and weight block b, kBlockInts int32 (ActShape); dx[t*nb + b] its scale and
// asum[t*nb + b] the sum of its int8 values. Grid (nb, n), 128 threads.
template <typename W>
__global__ void quantize_act(const float* x, int64_t cols, int nb, int* xq, float* dx, int* asum) {
  using V = typename W::View;
  using S = ActShape<W>;
  const int b = blockIdx.x, t = blockIdx.y;
  const float* xb = x + int64_t(t) * cols + int64_t(b) * V::kElems;
  float m = 0.0f;
  for (int j = threadIdx.x; j < V::kElems; j += blockDim.x) m = fmaxf(m, fabsf(xb[j]));
  __shared__ float part[4];
  __shared__ int ipart[4];
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = m;
  __syncthreads();
  m = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
  const float d = m / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
  int* blk = xq + (int64_t(t) * nb + b) * S::kBlockInts;
  for (int s = threadIdx.x; s < S::kBlockInts; s += blockDim.x) blk[s] = 0;
  __syncthreads();
  auto* q = reinterpret_cast<int8_t*>(blk);
  int sum = 0;
  for (int j = threadIdx.x; j < V::kElems; j += blockDim.x) {
    int byte = 0, digit = 0;
    V::place(j, byte, digit);
    const int v = __float2int_rn(xb[j] * id);
    q[((byte / 4) * S::kSlots + digit) * 4 + byte % 4] = int8_t(v);
    sum += v;
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) ipart[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    dx[int64_t(t) * nb + b] = d;
    asum[int64_t(t) * nb + b] = ipart[0] + ipart[1] + ipart[2] + ipart[3];
  }
}

// Code word w of a block: one 32-bit load where blocks keep 4-byte alignment (PTQ1_0), else two
// 16-bit loads (every block is 2-byte aligned).
template <typename W>
__device__ inline uint32_t code_word(const typename W::B& blk, int w) {
  const uint8_t* p = W::View::bytes(blk) + 4 * w;
  if constexpr (sizeof(typename W::B) % 4 == 0) return *reinterpret_cast<const uint32_t*>(p);
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return uint32_t(h[0]) | uint32_t(h[1]) << 16;
}

template <int N>
__device__ inline void load_ints(const int* src, int (&dst)[N]) {
  if constexpr (N % 4 == 0) {
    for (int i = 0; i < N; i += 4) {
      const int4 v = *reinterpret_cast<const int4*>(src + i);
      dst[i] = v.x, dst[i + 1] = v.y, dst[i + 2] = v.z, dst[i + 3] = v.w;
    }
  } else if constexpr (N % 2 == 0) {
    for (int i = 0; i < N; i += 2) {
      const int2 v = *reinterpret_cast<const int2*>(src + i);
      dst[i] = v.x, dst[i + 1] = v.y;
    }
  } else {
    for (int i = 0; i < N; ++i) dst[i] = src[i];
  }
}

// One warp for R rows; lane l walks the rows' (block, word) pairs l, l+32, ...; a word's
// activations are loaded once for the R rows. 128 threads a block.
template <typename W, int NT, int R>
__global__ void matvec_dp4a(const uint8_t* w, int64_t row_bytes, int rows, int nb, const int* xq, const float* dx,
                            const int* asum, int ntok, float* y) {
  using V = typename W::View;
  using B = typename W::B;
  using S = ActShape<W>;
  const int lane = threadIdx.x % 32;
  const int r0 = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * R;
  if (r0 >= rows) return;
  float acc[NT][R];
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = 0.0f;
  const int total = nb * S::kWords;
#pragma unroll 2
  for (int f = lane; f < total; f += 32) {
    const int b = f / S::kWords, wd = f - b * S::kWords;
    int a[NT][S::kSlots];
    float da[NT];
    int corr[NT];
    for (int t = 0; t < NT; ++t) {
      if (t >= ntok) break;
      const int64_t slot = int64_t(t) * nb + b;
      load_ints(xq + (slot * S::kWords + wd) * S::kSlots, a[t]);
      da[t] = dx[slot];
      corr[t] = V::kOff != 0 && wd == 0 ? V::kOff * asum[slot] : 0;
    }
    for (int r = 0; r < R; ++r) {
      if (r0 + r >= rows) break;
      const B& blk = reinterpret_cast<const B*>(w + int64_t(r0 + r) * row_bytes)[b];
      const uint32_t q = code_word<W>(blk, wd);
      const float d = V::scale(blk);
      for (int t = 0; t < NT; ++t) {
        if (t >= ntok) break;
        int s = 0;
        for (int n = 0; n < V::kDigits; ++n) s = __dp4a(int(V::digits4(q, n)), a[t][n], s);
        acc[t][r] += float(V::kMul * s + corr[t]) * (d * da[t]);
      }
    }
  }
  for (int t = 0; t < NT && t < ntok; ++t)
    for (int r = 0; r < R; ++r) {
      const float s = warp_sum(acc[t][r]);
      if (lane == 0 && r0 + r < rows) y[int64_t(t) * rows + r0 + r] = s;
    }
}

// One token, one lane a block: a block of 4 warps first copies the token's activations into shared
// memory; each warp then walks its R rows 32 blocks at a time, copying the rows' bytes into shared
// memory with the widest loads the row alignment allows (16 bytes where rows are 16-byte aligned),
// and each lane multiplies one block of each row. Activations are read once for R rows.
constexpr int kBlkWarps = 4;
// Ints a block of activations takes in matvec_block's shared memory. Strides that are multiples
// of 4 would put 8 to 32 of the lanes' blocks in one bank: they get one int more. PTQ1_0's and
// TQ1_0's (42, 78) cost two-way conflicts but keep the word's slots 8-byte aligned for int2 loads.
template <typename W>
constexpr int kActStride = ActShape<W>::kBlockInts % 4 == 0 ? ActShape<W>::kBlockInts + 1 : ActShape<W>::kBlockInts;

template <typename W, int R>
__global__ void matvec_block(const uint8_t* w, int64_t row_bytes, int rows, int nb, const int* xq, const float* dx,
                             const int* asum, float* y) {
  using V = typename W::View;
  using B = typename W::B;
  using S = ActShape<W>;
  constexpr int kChunk = 32 * int(sizeof(B));  // a multiple of 64: blocks are 2-byte aligned
  __shared__ __align__(16) uint8_t stage[kBlkWarps][R][kChunk];
  // Activations in shared memory, kActStride ints a block.
  extern __shared__ int2 act_smem[];
  int* act = reinterpret_cast<int*>(act_smem);
  for (int i = threadIdx.x; i < nb * S::kBlockInts; i += blockDim.x)
    act[i / S::kBlockInts * kActStride<W> + i % S::kBlockInts] = xq[i];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = (blockIdx.x * kBlkWarps + warp) * R;
  if (r0 >= rows) return;
  const int g = row_bytes % 16 == 0 ? 16 : row_bytes % 4 == 0 ? 4 : 2;
  float acc[R];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (int b0 = 0; b0 < nb; b0 += 32) {
    const int nblk = min(32, nb - b0), bytes = nblk * int(sizeof(B));
    const int wide_end = bytes / g * g;
    __syncwarp();
    for (int r = 0; r < R; ++r) {
      if (r0 + r >= rows) break;
      const uint8_t* src = w + int64_t(r0 + r) * row_bytes + int64_t(b0) * int64_t(sizeof(B));
      uint8_t* dst = stage[warp][r];
      if (g == 16) {
        for (int i = lane * 16; i < wide_end; i += 32 * 16)
          *reinterpret_cast<uint4*>(dst + i) = *reinterpret_cast<const uint4*>(src + i);
      } else if (g == 4) {
        for (int i = lane * 4; i < wide_end; i += 32 * 4)
          *reinterpret_cast<uint32_t*>(dst + i) = *reinterpret_cast<const uint32_t*>(src + i);
      }
      for (int i = (g == 2 ? 0 : wide_end) + lane * 2; i < bytes; i += 32 * 2)
        *reinterpret_cast<uint16_t*>(dst + i) = *reinterpret_cast<const uint16_t*>(src + i);
    }
    __syncwarp();
    if (lane >= nblk) continue;
    const int b = b0 + lane;
    const int* a = act + b * kActStride<W>;
    int s[R];
    for (int r = 0; r < R; ++r) s[r] = 0;
#pragma unroll
    for (int wd = 0; wd < S::kWords; ++wd) {
      int av[S::kSlots];
      if constexpr (kActStride<W> % 2 == 0) {
        load_ints(a + wd * S::kSlots, av);
      } else {
        for (int i = 0; i < S::kSlots; ++i) av[i] = a[wd * S::kSlots + i];
      }
      for (int r = 0; r < R; ++r) {
        const B& blk = reinterpret_cast<const B*>(stage[warp][r])[lane];
        const uint32_t q = code_word<W>(blk, wd);
        for (int n = 0; n < V::kDigits; ++n) s[r] = __dp4a(int(V::digits4(q, n)), av[n], s[r]);
      }
    }
    const float db = dx[b];
    const int corr = V::kOff * asum[b];
    for (int r = 0; r < R; ++r)
      acc[r] += float(V::kMul * s[r] + corr) * (V::scale(reinterpret_cast<const B*>(stage[warp][r])[lane]) * db);
  }
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && r0 + r < rows) y[r0 + r] = v;
  }
}

// ---- n <= 8, float weights ----

// One warp a row. Rows whose bytes keep 16-byte alignment are read 16 bytes a lane at a time
// (8 F16/BF16 or 4 F32 elements); the rest, and any tail, element by element.
template <typename W, int NT>
__global__ void matvec_fma(const uint8_t* w, int64_t row_bytes, int rows, int64_t cols, const float* x, int ntok,
                           float* y) {
  constexpr int kVec = 16 / W::kBytes;
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const uint8_t* row = w + int64_t(r) * row_bytes;
  float acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  const int64_t vec_end = row_bytes % 16 == 0 && cols % 4 == 0 ? cols / kVec * kVec : 0;
#pragma unroll 2
  for (int64_t k = int64_t(lane) * kVec; k < vec_end; k += 32 * kVec) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + k * W::kBytes);
    float v[kVec];
    for (int i = 0; i < kVec; ++i) v[i] = W::at(reinterpret_cast<const uint8_t*>(&raw), i);
    for (int t = 0; t < NT; ++t) {
      if (t >= ntok) break;
      const float* xt = x + int64_t(t) * cols + k;
      for (int i = 0; i < kVec; i += 4) {
        const float4 xv = *reinterpret_cast<const float4*>(xt + i);
        acc[t] += v[i] * xv.x + v[i + 1] * xv.y + v[i + 2] * xv.z + v[i + 3] * xv.w;
      }
    }
  }
  for (int64_t k = vec_end + lane; k < cols; k += 32) {
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

template <typename W, int NT, int R>
void launch_dp4a(Launcher& launch, const DeviceMatrix& m, int nb, const int* xq, const float* dx, const int* asum,
                 int64_t n, float* y) {
  const dim3 grid(unsigned(blocks_for(m.rows, 4 * R)));
  launch(matvec_dp4a<W, NT, R>, grid, dim3(128), 0, m.data, m.row_bytes, int(m.rows), nb, xq, dx, asum, int(n), y);
}

// Shared memory of matvec_block: the token's activations and R rows of 32 blocks for each warp.
template <typename W>
bool block_path_fits(int64_t cols, int rows_per_warp) {
  const size_t nb = size_t(cols / W::View::kElems);
  return nb * kActStride<W> * sizeof(int) +
             size_t(kBlkWarps) * size_t(std::max(rows_per_warp, 1)) * 32 * sizeof(typename W::B) <=
         48 * 1024;
}

template <typename W, int R>
void launch_block(Launcher& launch, const DeviceMatrix& m, int nb, const int* xq, const float* dx, const int* asum,
                  float* y) {
  const dim3 grid(unsigned(blocks_for(m.rows, kBlkWarps * R)));
  const size_t act_bytes = size_t(nb) * kActStride<W> * sizeof(int);
  launch(matvec_block<W, R>, grid, dim3(32 * kBlkWarps), act_bytes, m.data, m.row_bytes, int(m.rows), nb, xq, dx, asum,
         y);
}

// kernel "dp4a" (rows_per_warp 0: 2 for one token, 1 for more) or "blk" (one token).
template <typename W>
void run_dp4a(Launcher& launch, const DeviceMatrix& m, const float* x, int64_t n, float* y, ActScratch& scratch,
              const std::string& kernel, int rows_per_warp, bool reuse_act) {
  using V = typename W::View;
  using S = ActShape<W>;
  if (m.cols % V::kElems != 0) throw Error(cat("CUDA matmul: ", m.cols, " columns are not whole blocks"));
  const int nb = int(m.cols / V::kElems);
  const size_t q_bytes = size_t(n) * nb * S::kBlockInts * sizeof(int), s_bytes = size_t(n) * nb * sizeof(float);
  auto* base = static_cast<char*>(scratch.get(q_bytes + 2 * s_bytes));
  auto* xq = reinterpret_cast<int*>(base);
  auto* dx = reinterpret_cast<float*>(base + q_bytes);
  auto* asum = reinterpret_cast<int*>(base + q_bytes + s_bytes);
  if (!reuse_act) launch(quantize_act<W>, dim3(unsigned(nb), unsigned(n)), dim3(128), 0, x, m.cols, nb, xq, dx, asum);
  if (kernel == "blk") {
    if (n != 1) throw Error(cat("CUDA matmul path 'blk' takes one token, not ", n));
    if (!block_path_fits<W>(m.cols, rows_per_warp))
      throw Error(cat("CUDA matmul path 'blk:", rows_per_warp, "': ", m.cols, " columns of ", traits(m.type).name,
                      " need more than the 48 KiB of shared memory it may take"));
    if (rows_per_warp == 1) return launch_block<W, 1>(launch, m, nb, xq, dx, asum, y);
    if (rows_per_warp == 2) return launch_block<W, 2>(launch, m, nb, xq, dx, asum, y);
    if (rows_per_warp == 4) return launch_block<W, 4>(launch, m, nb, xq, dx, asum, y);
    throw Error(cat("CUDA matmul: no blk kernel for ", rows_per_warp, " rows a warp"));
  }
  // Two rows a warp only for one token (the timed choice's candidates); more tokens, one.
  const int rpw = rows_per_warp > 0 ? rows_per_warp : n == 1 ? 2 : 1;
  if (n == 1 && rpw == 1) return launch_dp4a<W, 1, 1>(launch, m, nb, xq, dx, asum, n, y);
  if (n == 1 && rpw == 2) return launch_dp4a<W, 1, 2>(launch, m, nb, xq, dx, asum, n, y);
  if (rpw == 1) return launch_dp4a<W, kMaxVecTokens, 1>(launch, m, nb, xq, dx, asum, n, y);
  throw Error(cat("CUDA matmul: no dp4a kernel for ", rpw, " rows a warp and ", n, " tokens"));
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
                 ActScratch& scratch, bool reuse_act) {
  check_shape(m, n);
  const std::string p = path;
  with_weight_type(m.type, [&](auto tag) {
    using W = decltype(tag);
    if (p == "wmma") return run_wmma<W>(launch, m, x, n, y);
    if (n > kMaxVecTokens) throw Error(cat("CUDA matmul path '", p, "' takes at most ", kMaxVecTokens, " tokens"));
    if constexpr (W::kQuant) {
      // "dp4a", "dp4a:R" or "blk:R" (R rows a warp).
      const std::string kernel = p.substr(0, p.find(':'));
      const int rpw = p.size() == kernel.size() + 2 && p[kernel.size()] == ':' ? p.back() - '0' : 0;
      if ((kernel == "dp4a" && (p == kernel || rpw >= 1)) || (kernel == "blk" && rpw >= 1))
        return run_dp4a<W>(launch, m, x, n, y, scratch, kernel, rpw, reuse_act);
    } else {
      if (p == "fma") return run_fma<W>(launch, m, x, n, y);
    }
    throw Error(cat("CUDA matmul: no path '", p, "' for ", traits(m.type).name));
  });
}

void matmul(Launcher& launch, const DeviceMatrix& m, const float* x, int64_t n, float* y, ActScratch& scratch,
            bool reuse_act, const std::string& one_token_path) {
  const bool quant = traits(m.type).block_elems > 1;
  const std::string path = n > kMaxVecTokens ? "wmma"
                           : !quant          ? "fma"
                           : n == 1 && !one_token_path.empty() ? one_token_path
                                                               : "dp4a";
  matmul_path(launch, path.c_str(), m, x, n, y, scratch, reuse_act);
}

std::string fastest_one_token_path(cudaStream_t stream, const DeviceMatrix& m) {
  if (traits(m.type).block_elems == 1) return "fma";
  // Zero activations (the kernels' speed does not depend on values), private buffers: a step
  // being recorded on the same stream refers to the backend's own.
  float *x = nullptr, *y = nullptr;
  void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;  // several times the L2 cache
  BONSAI_CUDA_CHECK(cudaMalloc(&x, size_t(m.cols) * sizeof(float)));
  BONSAI_CUDA_CHECK(cudaMalloc(&y, size_t(m.rows) * sizeof(float)));
  if (cudaMalloc(&flush, flush_bytes) != cudaSuccess) {  // a full device: time without flushing
    cudaGetLastError();
    flush = nullptr;
  }
  BONSAI_CUDA_CHECK(cudaMemsetAsync(x, 0, size_t(m.cols) * sizeof(float), stream));
  cudaEvent_t e0, e1;
  BONSAI_CUDA_CHECK(cudaEventCreate(&e0));
  BONSAI_CUDA_CHECK(cudaEventCreate(&e1));
  std::string best;
  float best_ms = 0;
  {
    Launcher launch(stream);
    ActScratch scratch;
    for (const char* p : {"dp4a:1", "dp4a:2", "blk:1", "blk:2", "blk:4"}) {
      float ms = 1e30f;
      try {
        matmul_path(launch, p, m, x, 1, y, scratch);  // warm-up; throws where the path does not fit
        for (int rep = 0; rep < 3; ++rep) {
          // In a decode, a weight comes from memory, not from the L2 cache: a write evicts it.
          if (flush) BONSAI_CUDA_CHECK(cudaMemsetAsync(flush, rep, flush_bytes, stream));
          BONSAI_CUDA_CHECK(cudaEventRecord(e0, stream));
          matmul_path(launch, p, m, x, 1, y, scratch);
          BONSAI_CUDA_CHECK(cudaEventRecord(e1, stream));
          BONSAI_CUDA_CHECK(cudaEventSynchronize(e1));
          float t = 0;
          BONSAI_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
          ms = std::min(ms, t);
        }
      } catch (const Error&) {
        continue;
      }
      if (best.empty() || ms < best_ms) best = p, best_ms = ms;
    }
    BONSAI_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(flush);
  cudaFree(y);
  cudaFree(x);
  return best.empty() ? "dp4a" : best;
}

void get_rows(Launcher& launch, const DeviceMatrix& m, const int32_t* ids, int64_t n, float* out) {
  with_weight_type(m.type, [&](auto tag) {
    using W = decltype(tag);
    const unsigned gx = unsigned(std::min<int64_t>((m.cols + 255) / 256, 64));
    launch(get_rows_kernel<W>, dim3(gx, unsigned(n)), dim3(256), 0, m.data, m.row_bytes, m.cols, ids, out);
  });
}

}  // namespace bonsai::cuda
