// Method `tune`: gradient refinement of each group's scale and code threshold against the layer's
// output error ‖X(W−Ŵ)ᵀ‖² = Σ_rows e G eᵀ (G = E[x xᵀ], so no raw inputs are needed), with
// LibTorch's autograd and Adam. It starts from `optimal` (which fits each group alone with only
// the diagonal of G) and keeps, per row, the best iterate by the exact loss of hard codes on
// fp16-rounded scales, so it is never worse than its start. Kept in its own file so that the torch
// headers (slow to compile) reach one translation unit only; without LibTorch the project still
// builds and the method reports how to get it.
#pragma once
#include "quantize/ternary.h"

namespace bonsai::quant {

// Throws an Error saying how to get LibTorch when this build has none (BONSAI_HAVE_TORCH unset);
// nothing otherwise. tune_ternary calls it too.
void require_torch();

// `in` already validated (gram present, cols a multiple of 128); `out` holds optimal's result for
// `in`, which this refines in place (three levels; four_levels is applied by the caller).
void tune_ternary(const MatrixIn& in, const MethodOptions& opts, TernaryMatrix& out);

}  // namespace bonsai::quant
