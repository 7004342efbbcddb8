// GPTQ on the ternary grid (quantize/gptq.h) with its numerics on a CUDA GPU: the damped Cholesky
// factor and its triangular inverse in double (cuSOLVER potrf, cuBLAS trsm), and every pass's
// column loop — one thread block per tile of rows, the group scales fitted per row at each group
// start on the device by the CPU's own rules (quantize/group_rules.h), the lazy batch's update of
// the later columns as a cuBLAS SGEMM. The scale refits and the code descent between passes run on
// the CPU (ScaleRefit, the same code as the CPU quantizer's), which is why the API takes the
// matrix in host memory: ScaleRefit reads W and the Gram matrix there.
//
// Only the matrix being processed is on the device, and everything is freed before returning.
// Results are those of the CPU's gptq_ternary up to float rounding (the order of the updates'
// sums differs), which tests/cuda compares; opts.gptq_block, a CPU speed setting that does not
// change the result, is not used: a lazy batch here is one group of 128 columns.
//
// No CUDA header here: plain C++ can call it. It exists only in builds with BONSAI_CUDA=ON
// (library bonsai_quant_cuda, which gives whoever links it BONSAI_HAVE_QUANT_CUDA=1); a caller
// guards its calls with `#ifdef BONSAI_HAVE_QUANT_CUDA`, and links the library
// `if(TARGET bonsai_quant_cuda)`.
#pragma once
#include <cstdint>

#include "quantize/ternary.h"

namespace bonsai::quant::cuda {

// Device bytes gptq_ternary needs at most for a rows × cols matrix, cuBLAS's and cuSOLVER's
// workspaces included (the CUDA context's own memory not): the larger of
//   factorization  16·cols² + 4 KiB              (H and L⁻¹ in double, potrf's status)
//   passes          4·cols² + 5·rows·cols + 512·rows + 2·rows·cols/128 + 4·cols
//                   (U in float; W, codes, the batch's errors, scales, importance)
// plus 32 MiB of cuBLAS workspace and 32 MiB for the libraries' internal state and allocation
// rounding. Depends on nothing but the shape, so it works without a device.
int64_t gptq_device_bytes(int64_t rows, int64_t cols);

// Free memory on the current device now (cudaMemGetInfo), to compare with gptq_device_bytes
// before any work; Error without a device.
int64_t device_free_bytes();

// The least free device memory any gptq_ternary call of this process has seen at its peaks (-1:
// none ran): what a job reports as its GPU peak, beside its own samples.
int64_t lowest_free_seen();

// What one call did, for logs and the tests: the most device memory its arrays held at once
// (the libraries' internal state not included), the least free device memory seen at its peaks
// (cudaMemGetInfo: everything included), the GPTQ passes it ran, and where the time went.
struct GptqDeviceReport {
  int64_t peak_bytes = 0;
  int64_t min_free_bytes = 0;
  int passes = 0;
  double factor_s = 0;  // H on the host, its upload, Cholesky, inverse
  double passes_s = 0;  // the passes on the device, transfers included
  double refit_s = 0;   // the CPU's refits and code descent between passes
};

// quant::gptq_ternary's contract: `in` already validated (gram present, cols a multiple of 128),
// `out` shaped; fills out.codes and out.scales. A damped Gram matrix that is not positive definite
// raises the CPU's Error. Error without a device or when it has not the memory.
void gptq_ternary(const MatrixIn& in, const MethodOptions& opts, TernaryMatrix& out,
                  GptqDeviceReport* report = nullptr);

// quantize_ternary(in, Method::gptq, opts) with GPTQ on the GPU: the same validation of the input
// first (the same Errors), then gptq_ternary.
TernaryMatrix quantize_gptq(const MatrixIn& in, const MethodOptions& opts = {}, GptqDeviceReport* report = nullptr);

}  // namespace bonsai::quant::cuda
