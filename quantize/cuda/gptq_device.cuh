// The two device halves of quantize/cuda's GPTQ (gptq_cuda.h): the inverse factor U of the damped
// H⁻¹, and one pass of the column loop with its lazy batch updates.
#pragma once
#include <cstdint>
#include <vector>

#include "calibrate/cuda/device.cuh"
#include "quantize/ternary.h"

namespace bonsai::quant::cuda {

using bonsai::cuda::BlasStream;
using bonsai::cuda::DeviceArray;
using bonsai::cuda::MemoryCount;

// U, the upper Cholesky factor of H⁻¹ (H⁻¹ = UᵀU), as the CPU's hinv: cols × cols float,
// column-major (U(i, j) at i + j·cols), zero below the diagonal. `h` is the damped H
// (gptq_detail::damped_hessian, column-major), reversed in place. Errors as the CPU's.
DeviceArray<float> inverse_factor(BlasStream& bs, MemoryCount& count, std::vector<double>& h, int64_t n);

// The arrays every pass works on.
struct PassArrays {
  DeviceArray<float> w;           // rows × cols, row-major: the weights, updated as GPTQ goes
  DeviceArray<float> err;         // rows × kGroup, row-major: the batch's errors over U_jj
  DeviceArray<int8_t> codes;      // rows × cols
  DeviceArray<uint16_t> scales;   // rows × cols/kGroup
  DeviceArray<float> importance;  // cols: the damped diagonal of H, the group fits' weights

  PassArrays(int64_t rows, int64_t cols, const std::vector<float>& importance_host, BlasStream& bs,
             MemoryCount& count);
};

// One GPTQ pass over the columns (gptq_detail::run_passes's `pass`): from w0 (rows × cols,
// row-major, host, the dead columns zeroed), codes into out.codes; with `fixed` the scales are
// out.scales, else each group's are fitted at its start and written to out.scales.
void run_pass(BlasStream& bs, const float* u, PassArrays& a, const float* w0, int64_t rows, int64_t cols, bool fixed,
              bool four_levels, TernaryMatrix& out);

// Bytes of the two phases' arrays (gptq_device_bytes adds the libraries' share).
int64_t factor_bytes(int64_t cols);
int64_t pass_bytes(int64_t rows, int64_t cols);

}  // namespace bonsai::quant::cuda
