// The residual codebooks' product without expanding R̂ (formats/residual.h): per codebook and
// token, a lookup table of every centroid's dot product with every sub-vector of x
// (size × cols/dim floats, size·cols multiply-adds), then per row a gather-add of one table entry
// per sub-vector (cols/dim adds instead of cols multiply-adds). Threads take whole codebooks when
// there are enough of them (each builds its own tables), else share one codebook's rows.
#pragma once
#include <cstdint>
#include <vector>

#include "formats/residual.h"

namespace bonsai::cpu {

// 4-bit kmeans indices regrouped for the int8 lookup kernel (residual_avx2.h, residual_lookup32):
// per block of 32 rows, per pair of sub-vectors, 32 bytes, byte j being row j's index byte for
// that pair (its two indices, low nibble first: the stored row's own byte). That is a transpose of
// the rows × row_bytes index bytes in blocks of 32 rows: the same number of bytes, so a token
// reads no more than the stored indices. Empty when the kernel does not apply (another scheme
// or index width, a codebook whose rows are not a multiple of 32, no AVX2).
std::vector<uint8_t> pack_residual_indices(const ResidualView& r);

// y[t][r] += (R̂ x_t)[r] for t < n (x: n × cols, y: n × rows, row-major as matmul's). The
// gather-add of kmeans indices of 1, 2, 4 or 8 bits runs on AVX2 when the CPU has it
// (residual_avx2.h); the rest is the scalar code of residual_matmul_scalar. With `packed` (from
// pack_residual_indices of the same view, non-empty) 4-bit indices take the int8 lookup kernel
// instead: tables rounded to int8 with one scale per 128 sub-vectors, so each output is off the
// float path by at most (sub-vectors per row) × (largest table entry) / 254.
void residual_matmul(const ResidualView& r, const float* x, int64_t n, float* y,
                     const std::vector<uint8_t>* packed = nullptr);
// The same without SIMD whatever the CPU: the fallback, and what the tests hold the fast path to.
void residual_matmul_scalar(const ResidualView& r, const float* x, int64_t n, float* y);

// The same through the expanded R̂, in double: what the tests compare with.
void residual_matmul_ref(const ResidualView& r, const float* x, int64_t n, float* y);

}  // namespace bonsai::cpu
