// See gram_avx2.h. Built with -mavx2 -mfma and -DEigen=bonsai_eigen_avx2 (calibrate/CMakeLists.txt):
// built for the baseline CPU (SSE2, no FMA), the Gram products were most of the calibration's
// statistics forward; this build cut that stage by 28% on a synthetic Qwen3-0.6B
// (docs/benchmarks.md, "Stage 1 end to end").
#include "calibrate/gram_avx2.h"

#include <Eigen/Core>

namespace bonsai::calib::avx2 {

void gram(const float* x, int64_t m, int64_t cols, float* g) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> X(x, m, cols);
  Eigen::Map<Eigen::MatrixXf> G(g, cols, cols);
  G.noalias() = X.transpose() * X;
}

}  // namespace bonsai::calib::avx2
