// The residual codebooks' gather-add for AVX2 (residual_avx2.cpp, compiled with -mavx2 like
// kernels_avx2.cpp). Call it only after avx2_usable() (kernels_avx2.h). Plain pointers and
// integers for the same reason as kernels_avx2.h: no inline library code in that file.
#pragma once
#include <cstdint>

namespace bonsai::cpu::avx2 {

// The tables of one codebook for one token x (residual.cpp's build_lut, with FMAs over 8 centroids
// at a time): lut[p·size + k] = Σ_j ct[j·size + k]·x[p·dim + j] (ct: the centroids transposed),
// xsum[p] = Σ_j x[p·dim + j].
void residual_lut(const float* ct, int64_t size, int64_t dim, const float* x, int64_t per_row, float* lut,
                  float* xsum);

// The int8 lookup kernel's tables: lut (per_row tables of size <= 16 floats) rounded to q (int8,
// 16 a table, zero past size) with one scale a chunk of kLookupChunk tables, scale[c] = max
// |entry| of chunk c / 127; q has room for per_row rounded up to even tables, the extra one zero.
constexpr int64_t kLookupChunk = 128;
void residual_lut_i8(const float* lut, int64_t size, int64_t per_row, int8_t* q, float* scale);

// y[32b + j] += Σ_p scale[p / kLookupChunk] · q[16p + index(32b + j, p)] for `blocks` blocks of
// 32 rows whose indices are `packed` (pack_residual_indices' layout, (per_row + 1) / 2 × 32 bytes
// a block): one pshufb looks up one table for 32 rows, int16 sums within a chunk (at most 128 ×
// 127, no overflow), a float step per chunk.
void residual_lookup32(const int8_t* q, const float* scale, int64_t per_row, const uint8_t* packed, int64_t blocks,
                       float* y);

// For n rows of kmeans indices (row_bytes apart from idx; per row per_row indices of `bits` bits,
// LSB first): y[r] += Σ_p lut[p·size + index(r, p)]. Indices of up to 4 bits: eight rows at a
// time through register permutes of the tables; 8 bits: eight indices per _mm256_i32gather_ps.
// lut must be readable 16 floats past per_row·size. Returns false, computing nothing, for index
// widths it has no kernel for (it has 1, 2, 4 and 8) or a table too large for 32-bit offsets.
bool residual_gather(const float* lut, int64_t size, int bits, int64_t per_row, const uint8_t* idx,
                     uint64_t row_bytes, int64_t n, float* y);

}  // namespace bonsai::cpu::avx2
