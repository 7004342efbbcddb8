// Least-squares group scales for fixed codes, in the layer's output metric. GPTQ fixes a group's
// scale when the group starts, from weights that later columns' error feedback has not reached,
// and judges it by the diagonal of H only; once every code is chosen, the scales that minimise the
// real objective ‖X(W − Ŵ)ᵀ‖² = Σ_r (w_r − ŵ_r)ᵀ G (w_r − ŵ_r) are one small linear system per
// row: with ŵ_r = Σ_g d_g c_g (c_g: the codes of group g, zero elsewhere),
//   Σ_h (c_gᵀ G c_h) d_h = c_gᵀ G w_r   for every group g of the row.
#pragma once
#include <vector>

#include "quantize/ternary.h"

namespace bonsai::quant {

// Replaces out.scales by the fp16 solution of the system above (in.gram required). A group whose
// codes are all zero keeps d = 0. Ternary results keep d ≥ 0 (a negative solution flips its
// group's codes, the same values); four-level ones keep the solved sign (a negative d mirrors the
// grid). The output error never gets worse than with the scales it started from, up to fp16
// rounding: those scales are one point of the minimised quadratic (tests/quantize check it).
void refit_scales(const MatrixIn& in, bool four_levels, TernaryMatrix& out);

// The same for several refits of one matrix (GPTQ's passes): G and G·w_r, which do not depend on
// the codes, are computed once. apply() also returns the output error ‖X(W − Ŵ)ᵀ‖² (as
// output_error) with the scales it leaves: row r's is w_rᵀGw_r − 2dᵀb + dᵀMd, from the same
// system, so GPTQ's passes compare errors without another product over the matrix.
//
// descend_codes() is the other half of the alternation: cyclic coordinate descent on the codes
// for fixed scales (QuantEase, Behdin et al. 2023). With e = w_r − ŵ_r and s = G e kept current,
// moving code j by δ (ŵ_j by Δ = δ·d) changes the error by −2Δ s_j + Δ² G_jj, so each code in
// turn takes the allowed level nearest to c_j + s_j / (d G_jj), the exact minimiser along that
// coordinate, and s is updated by one column of G. Every move lowers the error, so GPTQ's
// greedy left-to-right choice (which never revisits a column once later ones have moved) can
// only improve. Sweeps repeat until a sweep moves nothing or `sweeps` is reached; returns the
// number of codes moved.
class ScaleRefit {
 public:
  explicit ScaleRefit(const MatrixIn& in);
  double apply(bool four_levels, TernaryMatrix& out) const;
  int64_t descend_codes(bool four_levels, int sweeps, TernaryMatrix& out) const;

 private:
  const MatrixIn& in_;
  std::vector<float> g_, gw_;  // G (cols × cols) and W·G (rows × cols), row-major
  std::vector<double> wgw_;    // w_rᵀGw_r per row
};

}  // namespace bonsai::quant
