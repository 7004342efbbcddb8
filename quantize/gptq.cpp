#include "quantize/gptq.h"

#include <cblas.h>
#include <lapacke.h>

#include <Eigen/Core>
#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/gptq_detail.h"
#include "quantize/grid4.h"
#include "quantize/group_fit.h"
#include "quantize/scale_refit.h"

namespace bonsai::quant {
namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
using Eigen::Index;

// Rows per thread's share of a lazy batch, columns per sub-batch within it, columns per panel
// of its update (pass() in gptq_ternary). kSubBatch divides kGroup, so a group starts a sub-batch.
constexpr Index kRowTile = 64, kSubBatch = 16, kPanel = 256;
static_assert(kGroup % kSubBatch == 0);

// The dense factorizations below on fixed tiles of kFactorTile: every tile's product is one
// BLAS call on one thread (OpenBLAS's OpenMP build stays on the calling thread inside a parallel
// region), so the results do not depend on the thread count, and both threads work (LAPACK's
// dpotrf and dtrtri on one thread were a tenth of gptq's time while the other waited).
constexpr int kFactorTile = 256;

// The lower Cholesky factor of the n × n column-major `a`, in place (right-looking, by blocks of
// columns); false when `a` is not positive definite.
bool cholesky_lower(double* a, int n) {
  const int nb = kFactorTile;
  std::vector<std::pair<int, int>> tiles;
  for (int k = 0; k < n; k += nb) {
    const int kb = std::min(nb, n - k), m = n - k - kb;
    double* akk = a + k + size_t(k) * size_t(n);
    int info = 0;
#pragma omp parallel
#pragma omp single
    info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', kb, akk, n);
    if (info != 0) return false;
    if (m == 0) break;
    double* panel = akk + kb;  // rows k+kb.., columns k..k+kb: L_panel = A_panel L_kk⁻ᵀ
    const int chunks = (m + nb - 1) / nb;
#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < chunks; ++c)
      cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, std::min(nb, m - c * nb), kb, 1.0,
                  akk, n, panel + c * nb, n);
    // The trailing matrix's lower tiles -= L_panel L_panelᵀ.
    tiles.clear();
    for (int i = 0; i < chunks; ++i)
      for (int j = 0; j <= i; ++j) tiles.emplace_back(i, j);
    double* trail = akk + kb + size_t(kb) * size_t(n);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t t = 0; t < tiles.size(); ++t) {
      const auto [i, j] = tiles[t];
      const int nr = std::min(nb, m - i * nb), nc = std::min(nb, m - j * nb);
      double* c = trail + i * nb + size_t(j * nb) * size_t(n);
      if (i == j)
        cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, nr, kb, -1.0, panel + i * nb, n, 1.0, c, n);
      else
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, nr, nc, kb, -1.0, panel + i * nb, n, panel + j * nb, n,
                    1.0, c, n);
    }
  }
  return true;
}

// L⁻¹ for the lower triangle L of `l` (n × n column-major), lower, as a new matrix: its blocks of
// columns are independent triangular solves L[c0:, c0:] X = [I; 0], one per thread at a time.
MatD lower_inverse(const double* l, int n) {
  const int nb = kFactorTile, blocks = (n + nb - 1) / nb;
  MatD x = MatD::Zero(n, n);
  for (int i = 0; i < n; ++i) x(i, i) = 1.0;
#pragma omp parallel for schedule(dynamic, 1)
  for (int b = 0; b < blocks; ++b) {  // the largest solves first
    const int c0 = b * nb;
    cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, n - c0, std::min(nb, n - c0), 1.0,
                l + c0 + size_t(c0) * size_t(n), n, x.data() + c0 + size_t(c0) * size_t(n), n);
  }
  return x;
}

// GPTQ's Hinv: the upper Cholesky factor U of H⁻¹ (H⁻¹ = UᵀU). With P the order reversal and
// PHP = L Lᵀ, H = R Rᵀ for the upper R = P L P, so H⁻¹ = R⁻ᵀR⁻¹ and U = R⁻¹ = P L⁻¹ P: one
// Cholesky and one triangular inverse (n³/3 each), no explicit H⁻¹. `h` (n × n column-major) is
// overwritten.
MatF inverse_cholesky_upper(double* h_data, Index n) {
  Eigen::Map<MatD> h(h_data, n, n);
  h.reverseInPlace();
  if (!cholesky_lower(h.data(), int(n))) gptq_detail::throw_not_positive_definite();
  for (Index i = 0; i < n; ++i)
    if (!(h(i, i) != 0.0)) gptq_detail::throw_singular_factor();
  const MatD x = lower_inverse(h.data(), int(n));
  MatF u = MatF::Zero(n, n);
  for (Index j = 0; j < n; ++j)
    for (Index i = j; i < n; ++i) u(n - 1 - i, n - 1 - j) = float(x(i, j));
  return u;
}

// The upper factor of the damped H⁻¹ (gptq_detail::damped_hessian says which H), with `dead` and
// `importance` as there.
MatF damped_inverse_factor(const MatrixIn& in, double damp, std::vector<char>& dead, std::vector<float>& importance) {
  std::vector<double> h = gptq_detail::damped_hessian(in, damp, dead, importance);
  return inverse_cholesky_upper(h.data(), in.cols);
}

}  // namespace

namespace gptq_detail {

std::vector<double> damped_hessian(const MatrixIn& in, double damp, std::vector<char>& dead,
                                   std::vector<float>& importance) {
  const Index cols = in.cols;
  if (cols <= 0) throw Error(cat("quantize: gptq: a matrix of ", cols, " columns"));
  std::vector<double> storage(size_t(cols * cols));
  Eigen::Map<MatD> h(storage.data(), cols, cols);
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
  return storage;
}

void throw_not_positive_definite() {
  throw Error(cat("quantize: gptq: the damped Gram matrix is not positive definite (",
                  "a Gram matrix that is not E[x xᵀ] of real inputs, or raise the damping)"));
}

void throw_singular_factor() {
  throw Error("quantize: gptq: the Cholesky factor of the damped Gram matrix is singular");
}

void run_passes(const MatrixIn& in, const MethodOptions& opts, TernaryMatrix& out,
                const std::function<void(bool fixed)>& pass) {
  const Index rows = in.rows, cols = in.cols, groups = cols / kGroup;
  pass(false);
  if (opts.refit_scales) {
    const ScaleRefit refit(in);
    // Further passes alternate codes (GPTQ, scales fixed) and scales (refit, codes fixed); a pass
    // that does not lower the output error (as the refit measures it) is undone, so the result
    // never gets worse.
    double best = refit.apply(opts.four_levels, out);
    for (int p = 1; p < opts.gptq_passes; ++p) {
      const TernaryMatrix prev = out;
      pass(true);
      const double e = refit.apply(opts.four_levels, out);
      if (!(e < best)) {
        out = prev;
        break;
      }
      best = e;
    }
    // Then rounds of coordinate descent on the codes (scales fixed) and refit (codes fixed), each
    // kept only when it lowers the output error; they stop when the descent moves no code.
    for (int round = 0; round < opts.descent_rounds; ++round) {
      const TernaryMatrix prev = out;
      if (refit.descend_codes(opts.four_levels, kDescentSweeps, out) == 0) break;
      const double e = refit.apply(opts.four_levels, out);
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

}  // namespace gptq_detail

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
    MatF err_block;
    for (Index i1 = 0; i1 < cols; i1 += block) {
      const Index i2 = std::min(cols, i1 + block), count = i2 - i1;
      err_block.resize(rows, count);
      // Inside a lazy batch every update stays within its row, so tiles of rows run the batch's
      // columns independently, each row in the order of the serial algorithm (same bytes).
#pragma omp parallel
      {
        std::vector<float> wg(kGroup);
        std::vector<int8_t> scratch(kGroup);
#pragma omp for schedule(static)
        for (Index r0 = 0; r0 < rows; r0 += kRowTile) {
          const Index nr = std::min(kRowTile, rows - r0);
          for (Index j = i1; j < i2; ++j) {
            if (j % kGroup == 0 && !fixed) {
              const Index g = j / kGroup;
              for (Index r = r0; r < r0 + nr; ++r) {
                for (Index k = 0; k < kGroup; ++k) wg[size_t(k)] = w(r, j + k);
                uint16_t d = fit_optimal(wg.data(), importance.data() + j, kGroup, scratch.data());
                if (opts.four_levels) d = refine_grid4(wg.data(), importance.data() + j, kGroup, scratch.data(), d);
                out.scales[size_t(r * groups + g)] = d;
              }
            }
            if (j % kGroup == 0)
              for (Index r = r0; r < r0 + nr; ++r) scale[size_t(r)] = fp16_to_f32(out.scales[size_t(r * groups + j / kGroup)]);
            const float hjj = hinv(j, j);
            for (Index r = r0; r < r0 + nr; ++r) {
              const float x = w(r, j);
              const int8_t q = opts.four_levels ? code_for_grid4(x, scale[size_t(r)]) : code_for_scale(x, scale[size_t(r)]);
              out.codes[size_t(r * cols + j)] = q;
              err_block(r, j - i1) = (x - float(q) * scale[size_t(r)]) / hjj;
            }
            // Column by column only within a sub-batch of kSubBatch columns; the rest of the
            // batch gets the sub-batch's updates as one product at its end (the lazy batch's
            // reordering again, one level down: rank-1 updates of long rows were half of a pass).
            const Index s1 = j - (j - i1) % kSubBatch, s2 = std::min(i2, s1 + kSubBatch);
            if (j + 1 < s2)
              w.block(r0, j + 1, nr, s2 - j - 1).noalias() -=
                  err_block.col(j - i1).segment(r0, nr) * hinv.row(j).segment(j + 1, s2 - j - 1);
            if (j + 1 == s2 && s2 < i2)
              w.block(r0, s2, nr, i2 - s2).noalias() -=
                  err_block.block(r0, s1 - i1, nr, s2 - s1) * hinv.block(s1, s2, s2 - s1, i2 - s2);
          }
        }
      }
      // The lazy batch's update of every later column, rows × count × (cols − i2): almost all of
      // GPTQ's work. One SGEMM per panel of columns on one thread each (column-major, as Eigen
      // stores w and hinv), so the thread count cannot change a bit.
#pragma omp parallel for schedule(dynamic, 1)
      for (Index c0 = i2; c0 < cols; c0 += kPanel)
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, int(rows), int(std::min(kPanel, cols - c0)), int(count),
                    -1.0f, err_block.data(), int(rows), hinv.data() + i1 + c0 * cols, int(cols), 1.0f,
                    w.data() + c0 * rows, int(rows));
    }
  };

  gptq_detail::run_passes(in, opts, out, pass);
}

}  // namespace bonsai::quant
