#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/error.h"
#include "quantize/ternary.h"

namespace bonsai::quant {
namespace {

// tr(M G Mᵀ) = Σ_ij G_ij (MᵀM)_ij for a symmetric G and M rows × cols, row-major: the lower half
// of MᵀM by column panels (independent float products, one per thread at a time), each folded
// into the sum with G and dropped. Half the work of M·G, and no cols × cols temporary. Each
// panel's sum is kept apart and the panels are added in order afterwards: an OpenMP reduction
// would add them in whatever order the threads finish, and the result (which decides stage 2's
// and the residual's choices, and is stored in .bonsai files) would change with the thread count.
double quadratic_trace(const float* m, int64_t rows, int64_t cols, const double* g) {
  constexpr int64_t kPanel = 128;
  std::vector<double> panel(size_t((cols + kPanel - 1) / kPanel), 0.0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c0 = 0; c0 < cols; c0 += kPanel) {
    const int64_t cb = std::min(kPanel, cols - c0), rest = cols - c0;
    // (MᵀM)[c0:, c0:c0+cb], rest × cb column-major: one SGEMM on this thread. Read column-major,
    // the row-major M is Mᵀ (cols × rows, leading dimension cols), so this is Mᵀ[c0:]·Mᵀ[c0:c0+cb]ᵀ.
    std::vector<float> s(size_t(rest * cb));
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, int(rest), int(cb), int(rows), 1.0f, m + c0, int(cols),
                m + c0, int(cols), 0.0f, s.data(), int(rest));
    double sum = 0.0;
    for (int64_t j = 0; j < cb; ++j) {
      const double* gj = g + (c0 + j) * cols + c0;  // G[c0+j, c0:] = G[c0:, c0+j]
      const float* sj = s.data() + j * rest;
      double col = 0.0;
      for (int64_t i = j + 1; i < rest; ++i) col += gj[i] * double(sj[i]);
      sum += 2.0 * col + gj[j] * double(sj[j]);
    }
    panel[size_t(c0 / kPanel)] = sum;
  }
  double total = 0.0;
  for (double v : panel) total += v;
  return total;
}

// ‖X Eᵀ‖² = tr(E G Eᵀ) for E = W − Ŵ (Ŵ = 0 when w_hat is null), or without a Gram matrix the
// importance-weighted Σ E². float products (an error needs no more), double sums.
double error_sum(const MatrixIn& in, const float* w_hat) {
  const int64_t rows = in.rows, cols = in.cols;
  if (in.gram) {
    if (!w_hat) return quadratic_trace(in.w, rows, cols, in.gram);
    std::vector<float> e(size_t(rows * cols));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows * cols; ++i) e[size_t(i)] = in.w[i] - w_hat[i];
    return quadratic_trace(e.data(), rows, cols, in.gram);
  }
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = size_t(r * cols + j);
      const double a = in.importance ? double(in.importance[j]) : 1.0;
      const double d = double(in.w[i]) - (w_hat ? double(w_hat[i]) : 0.0);
      sum += a * d * d;
    }
  return sum;
}

void check(const MatrixIn& in, const std::vector<float>& w_hat, const char* what) {
  if (!in.w || in.rows <= 0 || in.cols <= 0 || w_hat.size() != size_t(in.rows * in.cols))
    throw Error(cat("quantize: ", what, ": ", w_hat.size(), " quantized weights for a ", in.rows, " x ", in.cols,
                    " matrix"));
}

}  // namespace

double relative_output_error(const MatrixIn& in, const std::vector<float>& w_hat) {
  check(in, w_hat, "relative_output_error");
  const double num = error_sum(in, w_hat.data()), den = error_sum(in, nullptr);
  return den > 0.0 ? num / den : (num > 0.0 ? INFINITY : 0.0);
}

}  // namespace bonsai::quant
