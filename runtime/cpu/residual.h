// The residual codebooks' product without expanding R̂ (formats/residual.h): per codebook and
// token, a lookup table of every centroid's dot product with every sub-vector of x
// (size × cols/dim floats, size·cols multiply-adds), then per row a gather-add of one table entry
// per sub-vector (cols/dim adds instead of cols multiply-adds). Threads take whole codebooks when
// there are enough of them (each builds its own tables), else share one codebook's rows.
#pragma once
#include <cstdint>

#include "formats/residual.h"

namespace bonsai::cpu {

// y[t][r] += (R̂ x_t)[r] for t < n (x: n × cols, y: n × rows, row-major as matmul's). The
// gather-add of kmeans indices of 1, 2, 4 or 8 bits runs on AVX2 when the CPU has it
// (residual_avx2.h); the rest is the scalar code of residual_matmul_scalar.
void residual_matmul(const ResidualView& r, const float* x, int64_t n, float* y);
// The same without SIMD whatever the CPU: the fallback, and what the tests hold the fast path to.
void residual_matmul_scalar(const ResidualView& r, const float* x, int64_t n, float* y);

// The same through the expanded R̂, in double: what the tests compare with.
void residual_matmul_ref(const ResidualView& r, const float* x, int64_t n, float* y);

}  // namespace bonsai::cpu
