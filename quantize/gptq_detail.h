// The parts of GPTQ (quantize/gptq.h) that the CPU quantizer and the CUDA one (quantize/cuda)
// share, so that both run one definition of each: the damped H and its importance diagonal, the
// errors a failed factorization raises, and the alternation of passes, scale refits and code
// descent around a backend's pass. Not for other callers.
#pragma once
#include <functional>
#include <vector>

#include "quantize/ternary.h"

namespace bonsai::quant::gptq_detail {

// Coordinate-descent sweeps over the codes per descent round (opts.descent_rounds): a sweep
// that moves no code ends the round earlier.
constexpr int kDescentSweeps = 8;

// H = 2G, column-major cols × cols (H[i + j·cols] = 2·G[i·cols + j]); a dead input (never nonzero,
// H_jj = 0) gets H_jj = 1 and is marked in `dead`, as in GPTQ: its weights cannot change the
// output, and a unit diagonal keeps H invertible. Then λ = damp·mean(diag H) is added to the
// diagonal, whose float values are returned in `importance` (the group fits' weights).
std::vector<double> damped_hessian(const MatrixIn& in, double damp, std::vector<char>& dead,
                                   std::vector<float>& importance);

// What a factorization of the damped H that fails raises (the same Error on every backend).
[[noreturn]] void throw_not_positive_definite();
[[noreturn]] void throw_singular_factor();

// Given a backend's GPTQ pass over the whole matrix — pass(false) fits each group's scales at its
// start and chooses every code into `out`; pass(true) keeps out.scales and re-chooses the codes —
// runs GPTQ from its first pass to the canonical result: with opts.refit_scales, the refits, the
// further passes and the rounds of code descent (each kept only when it lowers the output error,
// measured on the CPU by ScaleRefit), then every group's canonical form.
void run_passes(const MatrixIn& in, const MethodOptions& opts, TernaryMatrix& out,
                const std::function<void(bool fixed)>& pass);

}  // namespace bonsai::quant::gptq_detail
