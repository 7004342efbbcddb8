// Stage 2's residual codebooks fitted together with the four-level base, in the layer's output
// metric ‖X(W − Ŵ_base − R̂)ᵀ‖² (GPTVQ, van Baalen et al. 2024; AQLM's codebook update). A
// residual fitted afterwards to W − Ŵ_base fights GPTQ's own compensation (docs/results.md), so
// here the base codes and the residual indices are chosen in one GPTQ column loop:
//   joint pass   per row, left to right by sub-vectors of v columns: for each centroid c, each
//                column's grid code is the nearest level of (t − c), with the sub-vector's own
//                error feedback simulated exactly; the (centroid, codes) of least feedback loss
//                win, and their error goes onto the later columns through U (the upper factor of
//                the damped H⁻¹), as GPTQ's single-column rounding does
//   centroids    the codebook given every index and code: the exact least-squares solution of the
//                output error (one K·v system per codebook, from the Gram matrix)
//   base         codes and scales given the residual: ScaleRefit's code descent and scale refit
//                on W − R̂ (quantize/scale_refit.h)
// The codebook starts from importance-weighted k-means on the rounding errors of a GPTQ pass
// (weights 1/U_jj², the loss each column's error costs). Rounds repeat while the output error
// falls; the best state is returned, so the result is never worse than its first round.
#pragma once
#include "quantize/residual.h"
#include "quantize/ternary.h"

namespace bonsai::quant {

struct JointFit {
  TernaryMatrix base;    // four-level codes and scales, canonical
  ResidualFit residual;  // kmeans scheme
  double error = 0.0;    // relative output error of base + residual
  int rounds = 0;        // rounds run (the best may be an earlier one)
};

// From a four-level GPTQ result `start` of `in` (in.gram required; o.kind kmeans, validated).
// Error naming the problem when --rc-rows does not divide the rows.
JointFit fit_joint_residual(const MatrixIn& in, const MethodOptions& mo, const ResidualOptions& o,
                            const TernaryMatrix& start);

}  // namespace bonsai::quant
