#include "quantize/gptq.h"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/grid4.h"
#include "quantize/group_fit.h"
#include "quantize/scale_refit.h"

namespace bonsai::quant {
namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
using Eigen::Index;

// Panel width of the factorization's independent pieces (and of Eigen's own blocking).
constexpr Index kPanel = 128;

// Lower Cholesky factor of a, in place (only the lower triangle is read and meaningful after):
// right-looking and blocked, the panel solve and the trailing update (almost all of the n³/3
// work) split into independent pieces across threads, where Eigen's LLT runs them on one.
bool cholesky_lower(MatD& a) {
  const Index n = a.rows();
  for (Index k = 0; k < n; k += kPanel) {
    const Index kb = std::min(kPanel, n - k);
    Eigen::Ref<MatD> a11 = a.block(k, k, kb, kb);
    Eigen::LLT<Eigen::Ref<MatD>> diag(a11);
    if (diag.info() != Eigen::Success) return false;
    // A21 <- A21·L11⁻ᵀ (rows independent), then A22 <- A22 − A21·A21ᵀ (by column panels of
    // the lower part; each panel reads A21 only).
#pragma omp parallel for schedule(static)
    for (Index r0 = k + kb; r0 < n; r0 += kPanel) {
      auto a21 = a.block(r0, k, std::min(kPanel, n - r0), kb);
      a.block(k, k, kb, kb).triangularView<Eigen::Lower>().transpose().solveInPlace<Eigen::OnTheRight>(a21);
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (Index c0 = k + kb; c0 < n; c0 += kPanel) {
      const Index cb = std::min(kPanel, n - c0);
      a.block(c0, c0, n - c0, cb).noalias() -= a.block(c0, k, n - c0, kb) * a.block(c0, k, cb, kb).transpose();
    }
  }
  return true;
}

// GPTQ's Hinv: the upper Cholesky factor U of H⁻¹ (H⁻¹ = UᵀU). With P the order reversal and
// PHP = L Lᵀ, H = R Rᵀ for the upper R = P L P, so H⁻¹ = R⁻ᵀR⁻¹ and U = R⁻¹ = P L⁻¹ P: one
// Cholesky and one triangular inverse (n³/3 each), no explicit H⁻¹. `h` is overwritten.
MatF inverse_cholesky_upper(MatD& h) {
  const Index n = h.rows();
  h.reverseInPlace();
  if (!cholesky_lower(h))
    throw Error(cat("quantize: gptq: the damped Gram matrix is not positive definite (",
                    "a Gram matrix that is not E[x xᵀ] of real inputs, or raise the damping)"));
  // L⁻¹ by column panels, each independent: X = L⁻¹[p:, p:p+b] solves L[p:, p:]·X = [I; 0].
  MatF u = MatF::Zero(n, n);
#pragma omp parallel for schedule(dynamic, 1)
  for (Index p0 = 0; p0 < n; p0 += kPanel) {
    const Index pb = std::min(kPanel, n - p0), m = n - p0;
    MatD x = MatD::Zero(m, pb);
    x.topRows(pb).setIdentity();
    h.block(p0, p0, m, m).triangularView<Eigen::Lower>().solveInPlace(x);
    for (Index j = 0; j < pb; ++j)
      for (Index i = j; i < m; ++i) u(n - 1 - p0 - i, n - 1 - p0 - j) = float(x(i, j));
  }
  return u;
}

// H = 2G; a dead input (never nonzero) gets H_jj = 1 (`dead` marks it), as in GPTQ: its weights
// cannot change the output, and a unit diagonal keeps H invertible. Returns the upper factor of
// the damped H⁻¹ and, in `importance`, the damped diagonal of H.
MatF damped_inverse_factor(const MatrixIn& in, double damp, std::vector<char>& dead, std::vector<float>& importance) {
  const Index cols = in.cols;
  MatD h(cols, cols);
  for (Index i = 0; i < cols; ++i)
    for (Index j = 0; j < cols; ++j) h(i, j) = 2.0 * in.gram[i * cols + j];
  dead.assign(size_t(cols), 0);
  for (Index j = 0; j < cols; ++j)
    if (h(j, j) == 0.0) {
      dead[size_t(j)] = 1;
      h(j, j) = 1.0;
    }
  h.diagonal().array() += damp * h.diagonal().mean();
  importance.resize(static_cast<size_t>(cols));
  for (Index j = 0; j < cols; ++j) importance[size_t(j)] = float(h(j, j));
  return inverse_cholesky_upper(h);
}

}  // namespace

std::vector<float> gptq_inverse_factor(const MatrixIn& in, double damp) {
  std::vector<char> dead;
  std::vector<float> importance;
  const MatF u = damped_inverse_factor(in, damp, dead, importance);
  std::vector<float> out(size_t(in.cols * in.cols));
  for (Index i = 0; i < in.cols; ++i)
    for (Index j = 0; j < in.cols; ++j) out[size_t(i * in.cols + j)] = u(i, j);
  return out;
}

void gptq_ternary(const MatrixIn& in, const MethodOptions& opts, TernaryMatrix& out) {
  const Index rows = in.rows, cols = in.cols, groups = cols / kGroup;
  // The group scale's importance: the diagonal GPTQ works with (E[x²] up to the factor 2 and the
  // damping, which keeps it positive).
  std::vector<char> dead;
  std::vector<float> importance;
  const MatF hinv = damped_inverse_factor(in, opts.gptq_damp, dead, importance);

  // One pass of GPTQ over the columns. With `fixed`, the group scales already in `out` are kept
  // (a later pass: the codes are re-chosen, with error feedback, for the refitted scales).
  const Index block = (std::max<int64_t>(opts.gptq_block, 1) + kGroup - 1) / kGroup * kGroup;
  auto pass = [&](bool fixed) {
    MatF w(rows, cols);
    for (Index r = 0; r < rows; ++r)
      for (Index j = 0; j < cols; ++j) w(r, j) = dead[size_t(j)] ? 0.0f : in.w[r * cols + j];
    // Lazy batches hold whole groups, so a group's scales are fitted on weights that have all
    // updates from the columns before it. The result does not depend on the block size (the lazy
    // batch is an exact reordering of GPTQ's updates); only the speed does.
    std::vector<float> scale(static_cast<size_t>(rows));
    Eigen::VectorXf err(rows);
    MatF err_block;
    for (Index i1 = 0; i1 < cols; i1 += block) {
      const Index i2 = std::min(cols, i1 + block), count = i2 - i1;
      err_block.resize(rows, count);
      for (Index j = i1; j < i2; ++j) {
        if (j % kGroup == 0) {
          const Index g = j / kGroup;
#pragma omp parallel
          {
            std::vector<float> wg(kGroup);
            std::vector<int8_t> scratch(kGroup);
#pragma omp for schedule(static)
            for (Index r = 0; r < rows; ++r) {
              uint16_t& d = out.scales[size_t(r * groups + g)];
              if (!fixed) {
                for (Index k = 0; k < kGroup; ++k) wg[size_t(k)] = w(r, j + k);
                d = fit_optimal(wg.data(), importance.data() + j, kGroup, scratch.data());
                if (opts.four_levels) d = refine_grid4(wg.data(), importance.data() + j, kGroup, scratch.data(), d);
              }
              scale[size_t(r)] = fp16_to_f32(d);
            }
          }
        }
        const float hjj = hinv(j, j);
        for (Index r = 0; r < rows; ++r) {
          const float x = w(r, j);
          const int8_t q = opts.four_levels ? code_for_grid4(x, scale[size_t(r)]) : code_for_scale(x, scale[size_t(r)]);
          out.codes[size_t(r * cols + j)] = q;
          err[r] = (x - float(q) * scale[size_t(r)]) / hjj;
        }
        err_block.col(j - i1) = err;
        if (j + 1 < i2) w.middleCols(j + 1, i2 - j - 1).noalias() -= err * hinv.row(j).segment(j + 1, i2 - j - 1);
      }
      if (i2 < cols) w.rightCols(cols - i2).noalias() -= err_block * hinv.block(i1, i2, count, cols - i2);
    }
  };

  pass(false);
  if (opts.refit_scales) {
    refit_scales(in, opts.four_levels, out);
    // Further passes alternate codes (GPTQ, scales fixed) and scales (refit, codes fixed); a pass
    // that does not lower the output error is undone, so the result never gets worse.
    double best = relative_output_error(in, out.dequantize());
    for (int p = 1; p < opts.gptq_passes; ++p) {
      const TernaryMatrix prev = out;
      pass(true);
      refit_scales(in, opts.four_levels, out);
      const double e = relative_output_error(in, out.dequantize());
      if (!(e < best)) {
        out = prev;
        break;
      }
      best = e;
    }
  }

  // A scale fixed at the group's start may end up with no code using it (store 0 then), or, on the
  // four-level grid, with +2 unused or alone: the canonical form keeps a stored block re-encoding
  // to itself (quantize/grid4.h; for ternary codes it is exactly "d = 0 without a nonzero code").
  for (Index r = 0; r < rows; ++r)
    for (Index g = 0; g < groups; ++g)
      canonicalize_grid4(out.codes.data() + r * cols + g * kGroup, kGroup, out.scales[size_t(r * groups + g)]);
}

}  // namespace bonsai::quant
