// GPTQ (Frantar et al., 2022) on the ternary grid: columns quantized left to right, each one's
// rounding error pushed onto the columns not yet quantized through the upper Cholesky factor of
// the damped inverse Hessian H = 2·E[x xᵀ]. Each 128-group's scales are fixed, per row, when the
// group starts, from its current (error-updated) weights with the `optimal` rule. With
// opts.four_levels the grid is PQ2_0's {−1, 0, +1, +2}·d: the group's scale is then refined by
// grid4's Lloyd iterations on those weights, and each column rounds to the nearest of 4 levels.
// When every code is chosen, opts.refit_scales re-solves each row's scales by least squares in
// the output metric (quantize/scale_refit.h).
#pragma once
#include <vector>

#include "quantize/ternary.h"

namespace bonsai::quant {

// `in` already validated (gram present, cols a multiple of 128); fills out.codes and out.scales.
void gptq_ternary(const MatrixIn& in, const MethodOptions& opts, TernaryMatrix& out);

// GPTQ's error-feedback factor for other quantizers (the residual codebooks): the upper Cholesky
// factor U of the damped H⁻¹, H = 2·E[x xᵀ] (dead inputs H_jj = 1), row-major cols × cols.
// Rounding column j by e pushes −e/U_jj · U[j, j+1:] onto the later columns. in.gram required.
std::vector<float> gptq_inverse_factor(const MatrixIn& in, double damp);

}  // namespace bonsai::quant
