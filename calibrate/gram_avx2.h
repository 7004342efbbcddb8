// The Gram product XᵀX with Eigen compiled for AVX2+FMA (gram_avx2.cpp, the only file of
// calibrate/ built with those instructions; stats.cpp calls it only after cpu::avx2_usable()).
// The interface is plain pointers: that file's Eigen lives in a namespace of its own
// (-DEigen=...), so none of its template code can be the copy the linker keeps for callers
// compiled for the baseline CPU.
#pragma once
#include <cstdint>

namespace bonsai::calib::avx2 {

// g (cols × cols) = xᵀx for x of m rows of cols floats, row-major; g is symmetric, so its layout
// is the same by rows or by columns.
void gram(const float* x, int64_t m, int64_t cols, float* g);

}  // namespace bonsai::calib::avx2
