// The residual codebooks' product without expanding R̂ (formats/residual.h): per codebook and
// token, a lookup table of every centroid's dot product with every sub-vector of x
// (size × cols/dim floats, size·cols multiply-adds), then per row a gather-add of one table entry
// per sub-vector (cols/dim adds instead of cols multiply-adds).
#pragma once
#include <cstdint>

#include "formats/residual.h"

namespace bonsai::cpu {

// y[t][r] += (R̂ x_t)[r] for t < n (x: n × cols, y: n × rows, row-major as matmul's).
void residual_matmul(const ResidualView& r, const float* x, int64_t n, float* y);

// The same through the expanded R̂, in double: what the tests compare with.
void residual_matmul_ref(const ResidualView& r, const float* x, int64_t n, float* y);

}  // namespace bonsai::cpu
