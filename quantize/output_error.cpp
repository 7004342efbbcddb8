#include <Eigen/Core>
#include <cmath>

#include "formats/error.h"
#include "quantize/ternary.h"

namespace bonsai::quant {

double relative_output_error(const MatrixIn& in, const std::vector<float>& w_hat) {
  const int64_t rows = in.rows, cols = in.cols;
  if (!in.w || rows <= 0 || cols <= 0 || w_hat.size() != size_t(rows * cols))
    throw Error(cat("quantize: relative_output_error: ", w_hat.size(), " quantized weights for a ", rows, " x ",
                    cols, " matrix"));
  double num = 0.0, den = 0.0;
  if (in.gram) {
    // ‖X Eᵀ‖² = tr(E G Eᵀ) over rows e of E = W − Ŵ (and the same for W): one product of [E; W]
    // with G, then row dots. float for the product (a relative error needs no more), double sums.
    using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    MatF m(2 * rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t i = size_t(r * cols + j);
        m(r, j) = in.w[i] - w_hat[i];
        m(rows + r, j) = in.w[i];
      }
    const MatF g = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                       in.gram, cols, cols).cast<float>();
    const MatF mg = m * g;
    for (int64_t r = 0; r < rows; ++r) {
      num += mg.row(r).cast<double>().dot(m.row(r).cast<double>());
      den += mg.row(rows + r).cast<double>().dot(m.row(rows + r).cast<double>());
    }
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t i = size_t(r * cols + j);
        const double a = in.importance ? double(in.importance[j]) : 1.0;
        const double e = double(in.w[i]) - double(w_hat[i]);
        num += a * e * e;
        den += a * double(in.w[i]) * double(in.w[i]);
      }
  }
  return den > 0.0 ? num / den : (num > 0.0 ? INFINITY : 0.0);
}

}  // namespace bonsai::quant
