// GPTQ (Frantar et al., 2022) on the ternary grid: columns quantized left to right, each one's
// rounding error pushed onto the columns not yet quantized through the upper Cholesky factor of
// the damped inverse Hessian H = 2·E[x xᵀ]. Each 128-group's scales are fixed, per row, when the
// group starts, from its current (error-updated) weights with the `optimal` rule.
#pragma once
#include "quantize/ternary.h"

namespace bonsai::quant {

// `in` already validated (gram present, cols a multiple of 128); fills out.codes and out.scales.
void gptq_ternary(const MatrixIn& in, const MethodOptions& opts, TernaryMatrix& out);

}  // namespace bonsai::quant
