// One GPTQ pass on the device (quantize/gptq.cpp's pass, the same algorithm): lazy batches of one
// group of 128 columns. Inside a batch every update stays within its row, so a kernel runs the
// batch's columns for each row independently — one thread block per tile of rows, one warp per
// row at a time — and fits each row's group scale at the batch's start by the CPU's rules; then
// one SGEMM pushes the batch's errors onto every later column.
#include <algorithm>

#include "formats/fp16.h"
#include "quantize/cuda/gptq_device.cuh"
#include "quantize/group_rules.h"

namespace bonsai::quant::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kLanes = 32;
constexpr int kSlots = kGroup / kLanes;  // a row's batch columns per lane: lane + 32·t
constexpr int kWarps = 8, kRowsPerWarp = 2, kRowsPerBlock = kWarps * kRowsPerWarp;
// U's diagonal block of the batch in shared memory, row-major with one float of padding: the
// fill (down columns of U) and the reads (along a row) are both free of bank conflicts.
constexpr int kUStride = kGroup + 1;
static_assert(kGroup % kLanes == 0);

// A warp's shared scratch for one row's group fit.
struct FitScratch {
  uint64_t keys[kGroup];    // the support search's order (rules::magnitude_key)
  float w[kGroup];          // the row's weights at the group's start
  int8_t codes[kGroup];     // the fit's codes (only its scale is kept: the loop re-derives codes)
  int8_t spare[2 * kGroup]; // refine_grid4's scratch
};

constexpr size_t kUBytes = size_t(kGroup) * kUStride * sizeof(float);
constexpr size_t kSharedBytes = kUBytes + kWarps * sizeof(FitScratch);
static_assert(kUBytes % alignof(FitScratch) == 0);

// Ascending bitonic sort of kGroup keys by one warp. The keys are distinct, so the order is the
// one std::sort gives on the host.
__device__ void sort_keys(uint64_t* keys, int lane) {
  for (int k = 2; k <= kGroup; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = lane; i < kGroup; i += kLanes) {
        const int p = i ^ j;
        if (p > i) {
          const uint64_t a = keys[i], b = keys[p];
          if ((a > b) == ((i & k) == 0)) {
            keys[i] = b;
            keys[p] = a;
          }
        }
      }
      __syncwarp();
    }
}

// The group's scale for one row from its current weights (lane + 32·t in v[t]), as the CPU's
// pass: fit_optimal, then with four levels refine_grid4, both weighted by the damped diag of H.
// The search itself is sequential (the CPU's code); lane 0 runs it after the warp sorted the keys.
__device__ uint16_t fit_group(FitScratch& s, const float (&v)[kSlots], const float* importance, bool four_levels,
                              int lane) {
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    const int k = lane + kLanes * t;
    s.w[k] = v[t];
    s.keys[k] = rules::magnitude_key(v[t], k);
  }
  __syncwarp();
  sort_keys(s.keys, lane);
  unsigned d = 0;
  if (lane == 0) {
    uint16_t h = rules::fit_optimal_sorted(s.w, importance, kGroup, s.keys, s.codes);
    if (four_levels) h = rules::refine_grid4(s.w, importance, kGroup, s.codes, h, s.spare);
    d = h;
  }
  __syncwarp();
  return uint16_t(__shfl_sync(kFull, d, 0));
}

// Batch [i1, i1 + kGroup) of the pass for rows [blockIdx.x·kRowsPerBlock, +kRowsPerBlock). Per
// row, column j in order: the code of the current weight for the row's scale, the error over
// U_jj, and its update of the batch's later columns by row j of U — the serial algorithm's
// arithmetic, a product and a difference each (compiled without FMA contraction, as the CPU's).
__global__ void __launch_bounds__(kWarps* kLanes)
    batch_kernel(const float* w, int64_t rows, int64_t cols, int64_t i1, const float* u, const float* importance,
                 uint16_t* scales, int8_t* codes, float* err, int fixed, int four_levels) {
  extern __shared__ __align__(16) unsigned char shared[];
  float* us = reinterpret_cast<float*>(shared);
  FitScratch* scratch = reinterpret_cast<FitScratch*>(shared + kUBytes);
  for (int idx = threadIdx.x; idx < kGroup * kGroup; idx += blockDim.x) {
    const int jj = idx % kGroup, kk = idx / kGroup;  // down a column of U: coalesced reads
    us[jj * kUStride + kk] = u[(i1 + jj) + (i1 + kk) * cols];
  }
  __syncthreads();

  const int warp = int(threadIdx.x) / kLanes, lane = int(threadIdx.x) % kLanes;
  const int64_t groups = cols / kGroup, g = i1 / kGroup;
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + warp * kRowsPerWarp + rr;
    if (r >= rows) break;  // the same r for the whole warp
    float v[kSlots];
#pragma unroll
    for (int t = 0; t < kSlots; ++t) v[t] = w[r * cols + i1 + lane + kLanes * t];
    uint16_t d;
    if (fixed) {
      d = scales[r * groups + g];
    } else {
      d = fit_group(scratch[warp], v, importance + i1, four_levels != 0, lane);
      if (lane == 0) scales[r * groups + g] = d;
    }
    const float scale = fp16_to_f32(d);
    int8_t q_mine[kSlots];
    float e_mine[kSlots];
#pragma unroll
    for (int t = 0; t < kSlots; ++t) {
      for (int jj = 0; jj < kLanes; ++jj) {
        const int j = kLanes * t + jj;
        const float x = __shfl_sync(kFull, v[t], jj);
        const int8_t q = four_levels ? code_for_grid4(x, scale) : code_for_scale(x, scale);
        const float e = (x - float(q) * scale) / us[j * kUStride + j];
        if (lane == jj) {
          q_mine[t] = q;
          e_mine[t] = e;
        }
#pragma unroll
        for (int t2 = t; t2 < kSlots; ++t2) {
          const int k = lane + kLanes * t2;
          if (k > j) v[t2] -= e * us[j * kUStride + k];
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kSlots; ++t) {
      codes[r * cols + i1 + lane + kLanes * t] = q_mine[t];
      err[r * kGroup + lane + kLanes * t] = e_mine[t];
    }
  }
}

}  // namespace

int64_t pass_bytes(int64_t rows, int64_t cols) {
  // U in float, then the PassArrays.
  return 4 * cols * cols + 5 * rows * cols + 4 * kGroup * rows + 2 * rows * (cols / kGroup) + 4 * cols;
}

PassArrays::PassArrays(int64_t rows, int64_t cols, const std::vector<float>& importance_host, BlasStream& bs,
                       MemoryCount& count)
    : w(rows * cols, count, "GPTQ's weights"),
      err(rows * kGroup, count, "GPTQ's batch errors"),
      codes(rows * cols, count, "GPTQ's codes"),
      scales(rows * (cols / kGroup), count, "GPTQ's scales"),
      importance(cols, count, "GPTQ's importance") {
  bonsai::cuda::upload(bs.stream(), importance.get(), importance_host.data(), cols);
}

void run_pass(BlasStream& bs, const float* u, PassArrays& a, const float* w0, int64_t rows, int64_t cols, bool fixed,
              bool four_levels, TernaryMatrix& out) {
  const cudaStream_t s = bs.stream();
  const int64_t groups = cols / kGroup;
  bonsai::cuda::upload(s, a.w.get(), w0, rows * cols);
  if (fixed) bonsai::cuda::upload(s, a.scales.get(), out.scales.data(), rows * groups);
  BONSAI_CUDA_CHECK(cudaFuncSetAttribute(batch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSharedBytes)));
  const unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  const float minus_one = -1.0f, one = 1.0f;
  for (int64_t i1 = 0; i1 < cols; i1 += kGroup) {
    batch_kernel<<<blocks, kWarps * kLanes, kSharedBytes, s>>>(a.w.get(), rows, cols, i1, u, a.importance.get(),
                                                               a.scales.get(), a.codes.get(), a.err.get(), fixed,
                                                               four_levels);
    BONSAI_CUDA_CHECK(cudaGetLastError());
    // The batch's update of every later column: W[:, i2:] −= E · U[i1:i2, i2:]. Row-major W is
    // column-major Wᵀ, so this is Wᵀ[i2:, :] −= U[i1:i2, i2:]ᵀ · Eᵀ (Eᵀ: kGroup × rows, ld kGroup).
    const int64_t i2 = i1 + kGroup;
    if (i2 < cols)
      BONSAI_CUBLAS_CHECK(cublasSgemm(bs.blas(), CUBLAS_OP_T, CUBLAS_OP_N, int(cols - i2), int(rows), int(kGroup),
                                      &minus_one, u + i1 + i2 * cols, int(cols), a.err.get(), int(kGroup), &one,
                                      a.w.get() + i2, int(cols)));
  }
  bonsai::cuda::download(s, out.codes.data(), a.codes.get(), rows * cols);
  if (!fixed) bonsai::cuda::download(s, out.scales.data(), a.scales.get(), rows * groups);
}

}  // namespace bonsai::quant::cuda
