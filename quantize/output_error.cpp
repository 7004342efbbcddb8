#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/error.h"
#include "quantize/ternary.h"

namespace bonsai::quant {
namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
using Eigen::Index;

// tr(M G Mᵀ) = Σ_ij G_ij (MᵀM)_ij for a symmetric G: the lower half of MᵀM by column panels
// (independent float products, one per thread at a time), each folded into the sum with G and
// dropped. Half the work of M·G, and no cols × cols temporary. Each panel's sum is kept apart and
// the panels are added in order afterwards: an OpenMP reduction would add them in whatever order
// the threads finish, and the result (which decides stage 2's and the residual's choices, and is
// stored in .bonsai files) would change with the thread count.
double quadratic_trace(const MatF& m, const double* g) {
  const Index cols = m.cols();
  constexpr Index kPanel = 128;
  std::vector<double> panel(size_t((cols + kPanel - 1) / kPanel), 0.0);
#pragma omp parallel for schedule(dynamic, 1)
  for (Index c0 = 0; c0 < cols; c0 += kPanel) {
    const Index cb = std::min(kPanel, cols - c0), rest = cols - c0;
    const MatF s = m.rightCols(rest).transpose() * m.middleCols(c0, cb);  // (MᵀM)[c0:, c0:c0+cb]
    double sum = 0.0;
    for (Index j = 0; j < cb; ++j) {
      const double* gj = g + (c0 + j) * cols + c0;  // G[c0+j, c0:] = G[c0:, c0+j]
      double col = 0.0;
      for (Index i = j + 1; i < rest; ++i) col += gj[i] * double(s(i, j));
      sum += 2.0 * col + gj[j] * double(s(j, j));
    }
    panel[size_t(c0 / kPanel)] = sum;
  }
  double total = 0.0;
  for (double v : panel) total += v;
  return total;
}

}  // namespace

double relative_output_error(const MatrixIn& in, const std::vector<float>& w_hat) {
  const int64_t rows = in.rows, cols = in.cols;
  if (!in.w || rows <= 0 || cols <= 0 || w_hat.size() != size_t(rows * cols))
    throw Error(cat("quantize: relative_output_error: ", w_hat.size(), " quantized weights for a ", rows, " x ",
                    cols, " matrix"));
  double num = 0.0, den = 0.0;
  if (in.gram) {
    // ‖X Eᵀ‖² = tr(E G Eᵀ) with E = W − Ŵ, and ‖X Wᵀ‖² = tr(W G Wᵀ). float products (a relative
    // error needs no more), double sums.
    MatF e(rows, cols), w(rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t i = size_t(r * cols + j);
        e(r, j) = in.w[i] - w_hat[i];
        w(r, j) = in.w[i];
      }
    num = quadratic_trace(e, in.gram);
    den = quadratic_trace(w, in.gram);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t i = size_t(r * cols + j);
        const double a = in.importance ? double(in.importance[j]) : 1.0;
        const double d = double(in.w[i]) - double(w_hat[i]);
        num += a * d * d;
        den += a * double(in.w[i]) * double(in.w[i]);
      }
  }
  return den > 0.0 ? num / den : (num > 0.0 ? INFINITY : 0.0);
}

}  // namespace bonsai::quant
