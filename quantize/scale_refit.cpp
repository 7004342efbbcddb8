#include "quantize/scale_refit.h"

#include <cblas.h>

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/fp16.h"

namespace bonsai::quant {
namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatD = Eigen::MatrixXd;
using Eigen::Index;

// Rows per panel: each panel's products run on one thread (Eigen does not spawn threads inside an
// OpenMP region), and the partition does not depend on the thread count, so neither does the result.
constexpr Index kRowPanel = 32;

// f(d) = dᵀMd − 2dᵀb: the row's output error up to the constant wᵀGw.
double row_objective(const MatD& m, const Eigen::VectorXd& b, const Eigen::VectorXd& d) {
  return d.dot(m * d) - 2.0 * d.dot(b);
}

}  // namespace

void refit_scales(const MatrixIn& in, bool four_levels, TernaryMatrix& out) { ScaleRefit(in).apply(four_levels, out); }

ScaleRefit::ScaleRefit(const MatrixIn& in) : in_(in) {
  const Index rows = in.rows, cols = in.cols;
  g_.resize(size_t(cols * cols));
  for (Index i = 0; i < cols * cols; ++i) g_[size_t(i)] = float(in.gram[i]);
  gw_.resize(size_t(rows * cols));
  // By the row panels apply() uses, one SGEMM on one thread each: the thread count cannot change
  // a bit of it.
#pragma omp parallel for schedule(dynamic, 1)
  for (Index r0 = 0; r0 < rows; r0 += kRowPanel)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(std::min(kRowPanel, rows - r0)), int(cols), int(cols),
                1.0f, in.w + r0 * cols, int(cols), g_.data(), int(cols), 0.0f, gw_.data() + r0 * cols, int(cols));
  wgw_.resize(size_t(rows));
#pragma omp parallel for schedule(static)
  for (Index r = 0; r < rows; ++r) {
    double s = 0.0;
    for (Index j = 0; j < cols; ++j) s += double(in.w[r * cols + j]) * double(gw_[size_t(r * cols + j)]);
    wgw_[size_t(r)] = s;
  }
}

double ScaleRefit::apply(bool four_levels, TernaryMatrix& out) const {
  const MatrixIn& in = in_;
  const Index rows = in.rows, cols = in.cols, groups = cols / kGroup;
  const float* g = g_.data();
  std::vector<double> row_error(static_cast<size_t>(rows));  // added in row order after the loop: no thread race
#pragma omp parallel for schedule(dynamic, 1)
  for (Index r0 = 0; r0 < rows; r0 += kRowPanel) {
    const Index nr = std::min(kRowPanel, rows - r0);
    MatF c(nr, cols);
    for (Index r = 0; r < nr; ++r)
      for (Index j = 0; j < cols; ++j) c(r, j) = float(out.codes[size_t((r0 + r) * cols + j)]);
    // Row r of gw: G·w_r (G symmetric), computed once for every refit.
    const Eigen::Map<const MatF> gw(gw_.data() + r0 * cols, nr, cols);
    MatF y(nr, cols);  // row-major products, one SGEMM on this thread each
    std::vector<MatD> m(size_t(nr), MatD::Zero(groups, groups));
    std::vector<Eigen::VectorXd> b(size_t(nr), Eigen::VectorXd::Zero(groups));
    for (Index gi = 0; gi < groups; ++gi) {
      // Row r of y: c_gᵀ G restricted to the columns of groups gi.. (M is symmetric).
      const Index j0 = gi * kGroup;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(nr), int(cols - j0), int(kGroup), 1.0f,
                  c.data() + j0, int(cols), g + j0 * cols + j0, int(cols), 0.0f, y.data(), int(cols));
      for (Index r = 0; r < nr; ++r) {
        for (Index h = gi; h < groups; ++h) {
          const double v = double(y.row(r).segment((h - gi) * kGroup, kGroup).dot(c.row(r).segment(h * kGroup, kGroup)));
          m[size_t(r)](gi, h) = m[size_t(r)](h, gi) = v;
        }
        b[size_t(r)](gi) = double(c.row(r).segment(j0, kGroup).dot(gw.row(r).segment(j0, kGroup)));
      }
    }
    for (Index r = 0; r < nr; ++r) {
      MatD& mr = m[size_t(r)];
      Eigen::VectorXd& br = b[size_t(r)];
      uint16_t* scales = out.scales.data() + (r0 + r) * groups;
      int8_t* codes = out.codes.data() + (r0 + r) * cols;
      Eigen::VectorXd old_d(groups);
      for (Index h = 0; h < groups; ++h) old_d(h) = fp16_to_f32(scales[h]);
      const MatD m0 = mr;  // the system before placeholders: the row's error
      const Eigen::VectorXd b0 = br;
      row_error[size_t(r0 + r)] = wgw_[size_t(r0 + r)] + row_objective(m0, b0, old_d);
      // A group without a nonzero code, or whose inputs were never seen, does not change the
      // output: it keeps its scale (a placeholder equation, the same term in both objectives).
      std::vector<char> silent(size_t(groups), 0);
      for (Index h = 0; h < groups; ++h)
        if (!(mr(h, h) > 0.0)) {
          silent[size_t(h)] = 1;
          mr.row(h).setZero();
          mr.col(h).setZero();
          mr(h, h) = 1.0;
          br(h) = old_d(h);
        }
      const Eigen::LDLT<MatD> ldlt(mr);
      if (ldlt.info() != Eigen::Success) continue;
      const Eigen::VectorXd sol = ldlt.solve(br);
      Eigen::VectorXd new_d(groups);
      for (Index h = 0; h < groups; ++h)
        new_d(h) = silent[size_t(h)] || !std::isfinite(sol(h)) ? old_d(h) : fp16_to_f32(f32_to_fp16(float(sol(h))));
      if (!(row_objective(mr, br, new_d) < row_objective(mr, br, old_d))) continue;  // keep the old ones
      row_error[size_t(r0 + r)] = wgw_[size_t(r0 + r)] + row_objective(m0, b0, new_d);
      for (Index h = 0; h < groups; ++h) {
        float d = float(new_d(h));
        if (d < 0.0f && !four_levels) {  // ternary: the mirrored codes with |d| are the same values
          d = -d;
          for (Index k = 0; k < kGroup; ++k) codes[h * kGroup + k] = int8_t(-codes[h * kGroup + k]);
        }
        scales[h] = f32_to_fp16(d);
      }
    }
  }
  double total = 0.0;
  for (double e : row_error) total += e;
  return total;
}

int64_t ScaleRefit::descend_codes(bool four_levels, int sweeps, TernaryMatrix& out) const {
  const Index rows = in_.rows, cols = in_.cols, groups = cols / kGroup;
  const float* g = g_.data();
  const int lo = -1, hi = four_levels ? 2 : 1;
  std::vector<int64_t> moved(static_cast<size_t>(rows), 0);  // summed in row order: no thread race
#pragma omp parallel for schedule(dynamic, 1)
  for (Index r0 = 0; r0 < rows; r0 += kRowPanel) {
    const Index nr = std::min(kRowPanel, rows - r0);
    // s = G(w − ŵ) for the panel's rows: G·w from the constructor, G·ŵ by one SGEMM.
    MatF what(nr, cols), gwhat(nr, cols);
    for (Index r = 0; r < nr; ++r)
      for (Index j = 0; j < cols; ++j)
        what(r, j) = float(out.codes[size_t((r0 + r) * cols + j)]) * fp16_to_f32(out.scales[size_t((r0 + r) * groups + j / kGroup)]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(nr), int(cols), int(cols), 1.0f, what.data(), int(cols), g,
                int(cols), 0.0f, gwhat.data(), int(cols));
    std::vector<double> s(static_cast<size_t>(cols));
    for (Index r = 0; r < nr; ++r) {
      int8_t* codes = out.codes.data() + (r0 + r) * cols;
      const uint16_t* scales = out.scales.data() + (r0 + r) * groups;
      for (Index j = 0; j < cols; ++j) s[size_t(j)] = double(gw_[size_t((r0 + r) * cols + j)]) - double(gwhat(r, j));
      for (int sweep = 0; sweep < sweeps; ++sweep) {
        int64_t n = 0;
        for (Index j = 0; j < cols; ++j) {
          const double d = fp16_to_f32(scales[j / kGroup]), gjj = g[j * cols + j];
          if (d == 0.0 || !(gjj > 0.0)) continue;  // a silent group or an input never seen
          const int c = codes[j];
          const int best = int(std::clamp(std::nearbyint(c + s[size_t(j)] / (d * gjj)), double(lo), double(hi)));
          if (best == c) continue;
          const double step = double(best - c) * d;
          // Moves that gain less than rounding noise would only trade one float error for another.
          if (!(step * (2.0 * s[size_t(j)] - step * gjj) > 1e-12 * gjj * d * d)) continue;
          codes[j] = int8_t(best);
          const float* gj = g + j * cols;  // row j of G = column j (symmetric)
          for (Index k = 0; k < cols; ++k) s[size_t(k)] -= step * double(gj[k]);
          ++n;
        }
        moved[size_t(r0 + r)] += n;
        if (n == 0) break;
      }
    }
  }
  int64_t total = 0;
  for (int64_t n : moved) total += n;
  return total;
}

}  // namespace bonsai::quant
