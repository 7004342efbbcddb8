// When the CPU kernels fork OpenMP threads.
#pragma once
#include <cstdint>

namespace bonsai::cpu {

// Multiply-adds below which a fork of threads costs more than it saves; below it the kernels do
// not open a parallel region at all (even a one-thread region costs about a microsecond).
constexpr int64_t kParallelWork = int64_t(1) << 16;

// From this many tokens on, a step's products run as GEMMs: OpenBLAS SGEMMs for float weights
// (matmul.cpp) and attention (attention.cpp), codes unpacked once per tile of rows for quantized
// weights (kernels_avx2.cpp, gemm_q8); below it the per-token kernels are faster.
constexpr int64_t kGemmTokens = 16;

}  // namespace bonsai::cpu
