// Matrix products and row lookups of stored weights on the GPU. Weights are device copies of
// the file's bytes in their stored type; activations are float32.
//
// Paths (chosen by the token count n):
//  - n <= 8, quantized types: activations quantized to int8 once per call, one scale per weight
//    block (amax/127), laid out like the block's 32-bit code words (one int8 per digit of each
//    code byte); each word gives four digits at a time (CodeView::digits4) for one dp4a.
//    "dp4a:R": lanes walk a row's words, R rows a warp; "blk:R" (one token): one lane a block,
//    rows staged in shared memory by wide loads, R rows a warp. One token takes the path timed
//    fastest for the matrix (fastest_one_token_path); more tokens take dp4a.
//    Error bound per output: sum over blocks b of amax_b/254 * sum_{k in b} |W[r,k]|.
//  - n <= 8, float types: float FMA dot products, 16-byte loads.
//  - n > 8 (prompts): tensor cores (WMMA, fp16 inputs, fp32 accumulation) on tiles decoded from
//    the stored blocks in shared memory; inputs rounded to fp16, relative error ~1e-3.
#pragma once
#include <cstdint>
#include <string>

#include "formats/types.h"
#include "runtime/cuda/launcher.cuh"

namespace bonsai::cuda {

// A weight matrix in device memory: rows of `cols` elements, row_bytes apart.
struct DeviceMatrix {
  TypeId type;
  const uint8_t* data;
  int64_t rows, cols, row_bytes;
};

// Device scratch for the quantized activations; grows and keeps old buffers until destroyed
// (a recorded step may still refer to them).
class ActScratch {
 public:
  ~ActScratch();
  void* get(size_t bytes);

 private:
  void* buf_ = nullptr;
  size_t size_ = 0;
  std::vector<void*> retired_;
};

// y[t*rows + r] = sum_k W[r,k] x[t*cols + k] for t < n (x, y device memory, not overlapping).
// reuse_act: x is the input of the previous call, unchanged, and w has that call's type and
// columns: its quantized activations, still in scratch, are used again (q/k/v, gate/up).
// one_token_path: the path for n == 1 on a quantized type (fastest_one_token_path), "" for dp4a.
void matmul(Launcher& launch, const DeviceMatrix& w, const float* x, int64_t n, float* y, ActScratch& scratch,
            bool reuse_act = false, const std::string& one_token_path = "");
// The fastest one-token path for this matrix among dp4a:1/2 and blk:1/2/4, by timing each on the
// matrix itself with the L2 cache flushed before each run ("fma" for float types). Which kernel
// wins depends on the shape: a short matrix needs many warps, a tall one few activation reads.
std::string fastest_one_token_path(cudaStream_t stream, const DeviceMatrix& w);
// The matmul paths by name, for tests that hold each to its bound and time it: "dp4a" (n <= 8
// quantized; "dp4a:1", one row a warp, "dp4a:2", two, one token only; "blk:R", one token, one
// lane a block, R = 1, 2 or 4 rows a warp), "fma" (n <= 8 float), "wmma".
void matmul_path(Launcher& launch, const char* path, const DeviceMatrix& w, const float* x, int64_t n, float* y,
                 ActScratch& scratch, bool reuse_act = false);
// out[i*cols + k] = W[ids[i], k] (ids: device memory, already checked against rows).
void get_rows(Launcher& launch, const DeviceMatrix& w, const int32_t* ids, int64_t n, float* out);

}  // namespace bonsai::cuda
