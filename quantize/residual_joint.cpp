#include "quantize/residual_joint.h"

#include <cblas.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/gptq.h"
#include "quantize/gptq_detail.h"
#include "quantize/grid4.h"
#include "quantize/kmeans.h"
#include "quantize/scale_refit.h"

namespace bonsai::quant {
namespace {

// Columns per lazy batch of the joint pass (a multiple of every sub-vector length), columns per
// panel of its update; rounds at most, and the relative gain below which they stop.
constexpr int64_t kBatch = 128, kPanel = 256;
constexpr int kMaxRounds = 6;
constexpr double kMinGain = 1e-3;
// The exact centroid solve holds a (K·v)² system per codebook and factors it in (K·v)³/3; larger
// codebooks take the weighted mean of their targets (the diagonal of the same system) instead.
constexpr int64_t kMaxExactUnknowns = 2048;

struct Problem {
  const MatrixIn* in = nullptr;
  int64_t rows = 0, cols = 0, dim = 0, size = 0, books = 0, rows_per_book = 0, per_row = 0;
  std::vector<float> u;      // cols × cols, row-major upper factor of the damped H⁻¹
  std::vector<float> w;      // W with dead inputs zeroed, as GPTQ quantizes it
  std::vector<float> omega;  // 1 / U_jj²: the loss of a unit error in column j
};

// The state a round improves: base codes and scales, codebooks (fp16-rounded floats
// [books][size][dim]) and one index per sub-vector (rows × per_row).
struct State {
  TernaryMatrix base;
  std::vector<float> book;
  std::vector<uint32_t> idx;
};

// Row r's sub-vector at column j: the centroid (of `book`, K × dim) and grid codes of least
// feedback loss for current values t, the sub-vector's own feedback simulated exactly. Returns
// the index; codes into q.
uint32_t choose(const Problem& p, const float* t, int64_t j, float d, const float* book, int64_t size, int8_t* q) {
  const int64_t v = p.dim;
  float tt[kRcGroup];
  int8_t qk[kRcGroup];
  double best = std::numeric_limits<double>::infinity();
  uint32_t bi = 0;
  for (int64_t k = 0; k < size; ++k) {
    const float* c = book + k * v;
    std::copy_n(t, v, tt);
    double loss = 0.0;
    int64_t i = 0;
    for (; i < v && loss < best; ++i) {
      const float x = tt[i] - c[i];
      qk[i] = code_for_grid4(x, d);
      const float* ur = p.u.data() + (j + i) * p.cols + j;
      const float e = (x - float(qk[i]) * d) / ur[i];
      loss += double(e) * e;
      for (int64_t l = i + 1; l < v; ++l) tt[l] -= e * ur[l];
    }
    if (i == v && loss < best) {
      best = loss;
      bi = uint32_t(k);
      std::copy_n(qk, v, q);
    }
  }
  return bi;
}

// One GPTQ pass over the columns with the residual inside: st.base's scales fixed, its codes and
// st.idx re-chosen for codebook `book`. tau (rows × cols) gets each column's residual target, the
// value the column had when committed minus its grid part.
void joint_pass(const Problem& p, const std::vector<float>& book, int64_t size, State& st, std::vector<float>& tau) {
  const int64_t rows = p.rows, cols = p.cols, v = p.dim, groups = cols / kGroup;
  std::vector<float> w = p.w, err(size_t(rows * kBatch));
  tau.assign(size_t(rows * cols), 0.0f);
  for (int64_t i1 = 0; i1 < cols; i1 += kBatch) {
    const int64_t i2 = std::min(cols, i1 + kBatch), count = i2 - i1;
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      float* wr = w.data() + r * cols;
      const float* bk = book.data() + (r / p.rows_per_book) * size * v;
      int8_t q[kRcGroup];
      for (int64_t j = i1; j < i2; j += v) {
        const float d = fp16_to_f32(st.base.scales[size_t(r * groups + j / kGroup)]);
        const uint32_t k = choose(p, wr + j, j, d, bk, size, q);
        st.idx[size_t(r * p.per_row + j / v)] = k;
        for (int64_t i = 0; i < v; ++i) {
          const int64_t c = j + i;
          const float x = wr[c], grid = float(q[i]) * d;
          st.base.codes[size_t(r * cols + c)] = q[i];
          tau[size_t(r * cols + c)] = x - grid;
          const float* uc = p.u.data() + c * cols;
          const float e = (x - grid - bk[k * v + i]) / uc[c];
          err[size_t(r * kBatch + (c - i1))] = e;
          for (int64_t l = c + 1; l < i2; ++l) wr[l] -= e * uc[l];
        }
      }
    }
    // The batch's feedback onto every later column: one SGEMM per panel, each on one thread, so
    // the thread count cannot change a bit.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t c0 = i2; c0 < cols; c0 += kPanel)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(std::min(kPanel, cols - c0)), int(count),
                  -1.0f, err.data(), int(kBatch), p.u.data() + i1 * cols + c0, int(cols), 1.0f, w.data() + c0,
                  int(cols));
  }
}

std::vector<float> grid_values(const TernaryMatrix& b) { return b.dequantize(); }

// R̂ of a state, rows × cols.
std::vector<float> residual_of(const Problem& p, const State& st) {
  std::vector<float> r(size_t(p.rows * p.cols));
  for (int64_t row = 0; row < p.rows; ++row) {
    const float* bk = st.book.data() + (row / p.rows_per_book) * p.size * p.dim;
    for (int64_t s = 0; s < p.per_row; ++s)
      std::copy_n(bk + int64_t(st.idx[size_t(row * p.per_row + s)]) * p.dim, p.dim, r.data() + row * p.cols + s * p.dim);
  }
  return r;
}

double error_of(const Problem& p, const State& st) {
  std::vector<float> w_hat = grid_values(st.base);
  const std::vector<float> r = residual_of(p, st);
  for (size_t i = 0; i < w_hat.size(); ++i) w_hat[i] += r[i];
  return relative_output_error(*p.in, w_hat);
}

void round_fp16(std::vector<float>& v) {
  for (float& x : v) x = fp16_to_f32(f32_to_fp16(x));
}

// The codebooks given every index and code. Exact: with e_r = w_r − ŵ_r and R̂_r = A_r c (A_r
// places the row's centroids), the output error is Σ_r (e_r − A_r c)ᵀ G (e_r − A_r c), minimised
// by (Σ_r A_rᵀ G A_r) c = Σ_r A_rᵀ G e_r; a small ridge towards the current centroids keeps
// unused ones where they are. Larger codebooks: the diagonal of that system (the tau targets'
// mean weighted by 1/U_jj²).
void update_centroids(const Problem& p, const std::vector<float>& tau, State& st) {
  const int64_t n = p.size * p.dim, cols = p.cols, v = p.dim;
  const MatrixIn& in = *p.in;
  if (n > kMaxExactUnknowns) {
    std::vector<double> num(st.book.size(), 0.0), den(st.book.size(), 0.0);
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t s = 0; s < p.per_row; ++s) {
        const size_t at = size_t(((r / p.rows_per_book) * p.size + st.idx[size_t(r * p.per_row + s)]) * v);
        for (int64_t i = 0; i < v; ++i) {
          const int64_t c = s * v + i;
          num[at + size_t(i)] += double(p.omega[size_t(c)]) * tau[size_t(r * cols + c)];
          den[at + size_t(i)] += p.omega[size_t(c)];
        }
      }
    for (size_t i = 0; i < st.book.size(); ++i)
      if (den[i] > 0.0) st.book[i] = float(num[i] / den[i]);
    round_fp16(st.book);
    return;
  }
  // s_r = G e_r for every row: one product.
  const std::vector<float> w_hat = grid_values(st.base);
  std::vector<double> e(size_t(p.rows * cols)), s(e.size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = double(in.w[i]) - double(w_hat[i]);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(p.rows), int(cols), int(cols), 1.0, e.data(), int(cols),
              in.gram, int(cols), 0.0, s.data(), int(cols));
  for (int64_t b = 0; b < p.books; ++b) {
    Eigen::MatrixXd m = Eigen::MatrixXd::Zero(n, n);
    Eigen::VectorXd rhs = Eigen::VectorXd::Zero(n);
    const int64_t r0 = b * p.rows_per_book, r1 = r0 + p.rows_per_book;
    // Each centroid's rows of the system gathered by one thread, in row order: the same bits for
    // any thread count.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < p.size; ++k) {
      const int64_t kp = k * v;
      for (int64_t r = r0; r < r1; ++r) {
        const uint32_t* ir = st.idx.data() + r * p.per_row;
        for (int64_t sp = 0; sp < p.per_row; ++sp) {
          if (int64_t(ir[sp]) != k) continue;
          for (int64_t i = 0; i < v; ++i) rhs[kp + i] += s[size_t(r * cols + sp * v + i)];
          for (int64_t sq = 0; sq < p.per_row; ++sq) {
            const int64_t kq = int64_t(ir[sq]) * v;
            for (int64_t i = 0; i < v; ++i) {
              const double* g = in.gram + (sp * v + i) * cols + sq * v;
              for (int64_t l = 0; l < v; ++l) m(kp + i, kq + l) += g[l];
            }
          }
        }
      }
    }
    double trace = 0.0;
    for (int64_t i = 0; i < n; ++i) trace += m(i, i);
    const double ridge = 1e-6 * std::max(trace / double(n), 1e-30);
    float* cb = st.book.data() + b * n;
    for (int64_t i = 0; i < n; ++i) {
      m(i, i) += ridge;
      rhs[i] += ridge * cb[i];
    }
    const Eigen::VectorXd c = m.ldlt().solve(rhs);
    for (int64_t i = 0; i < n; ++i)
      if (std::isfinite(c[i])) cb[i] = float(c[i]);
  }
  round_fp16(st.book);
}

// Base codes and scales given the residual: ScaleRefit on W − R̂.
void update_base(const Problem& p, State& st) {
  const std::vector<float> r = residual_of(p, st);
  std::vector<float> target(r.size());
  for (size_t i = 0; i < r.size(); ++i) target[i] = p.in->w[i] - r[i];
  MatrixIn shifted = *p.in;
  shifted.w = target.data();
  const ScaleRefit refit(shifted);
  refit.descend_codes(true, gptq_detail::kDescentSweeps, st.base);
  refit.apply(true, st.base);
}

// The first codebooks: importance-weighted k-means on the rounding errors of a plain GPTQ pass.
std::vector<float> initial_books(const Problem& p, const ResidualOptions& o, State& st) {
  std::vector<float> tau;
  const std::vector<float> zero(size_t(p.books * p.dim), 0.0f);
  Problem one = p;
  one.rows_per_book = p.rows;  // a single zero centroid for every row
  State tmp = st;
  joint_pass(one, zero, 1, tmp, tau);
  std::vector<float> books;
  for (int64_t b = 0; b < p.books; ++b) {
    Points pts;
    pts.dim = p.dim;
    pts.n = p.rows_per_book * p.per_row;
    pts.x.assign(tau.begin() + b * p.rows_per_book * p.cols, tau.begin() + (b + 1) * p.rows_per_book * p.cols);
    pts.w.resize(size_t(pts.n));
    for (int64_t i = 0; i < pts.n; ++i) pts.w[size_t(i)] = p.omega.data() + (i % p.per_row) * p.dim;
    std::vector<float> c = kmeans(pts, std::min(p.size, pts.n), o.iterations, o.seed + uint64_t(b));
    c.resize(size_t(p.size * p.dim), 0.0f);
    books.insert(books.end(), c.begin(), c.end());
  }
  return books;
}

ResidualFit stored(const Problem& p, const State& st) {
  ResidualFit f;
  f.scheme = ResidualScheme::kmeans;
  f.dim = p.dim;
  f.size = p.size;
  f.books = p.books;
  f.codebook.resize(st.book.size());
  for (size_t i = 0; i < st.book.size(); ++i) f.codebook[i] = f32_to_fp16(st.book[i]);
  const int bits = index_bits(p.size);
  const uint64_t rb = index_row_bytes(p.per_row, bits);
  f.index.assign(size_t(uint64_t(p.rows) * rb), 0);
  for (int64_t r = 0; r < p.rows; ++r)
    pack_indices(st.idx.data() + r * p.per_row, p.per_row, bits, f.index.data() + uint64_t(r) * rb);
  return f;
}

}  // namespace

JointFit fit_joint_residual(const MatrixIn& in, const MethodOptions& mo, const ResidualOptions& o,
                            const TernaryMatrix& start) {
  validate_residual(o);
  if (o.kind != ResidualKind::kmeans || !in.gram)
    throw Error("quantize: residual: the joint fit needs the kmeans scheme and a Gram matrix");
  Problem p;
  p.in = &in;
  p.rows = in.rows;
  p.cols = in.cols;
  p.dim = o.dim;
  p.size = o.size;
  p.rows_per_book = o.rows == 0 ? in.rows : o.rows;
  if (p.rows_per_book <= 0 || in.rows % p.rows_per_book != 0)
    throw Error(cat("quantize: residual: --rc-rows ", o.rows, " does not divide the ", in.rows,
                    " rows of the matrix (0 = all rows)"));
  p.books = in.rows / p.rows_per_book;
  p.per_row = in.cols / o.dim;
  p.u = gptq_inverse_factor(in, mo.gptq_damp);
  p.w.assign(in.w, in.w + in.rows * in.cols);
  p.omega.resize(size_t(in.cols));
  for (int64_t j = 0; j < in.cols; ++j) {
    const float ujj = p.u[size_t(j * in.cols + j)];
    p.omega[size_t(j)] = 1.0f / (ujj * ujj);
    if (in.gram[j * in.cols + j] == 0.0)  // dead input: GPTQ quantizes it as 0
      for (int64_t r = 0; r < in.rows; ++r) p.w[size_t(r * in.cols + j)] = 0.0f;
  }

  State st;
  st.base = start;
  st.idx.assign(size_t(p.rows * p.per_row), 0);
  st.book = initial_books(p, o, st);
  JointFit out;
  State best;
  double best_error = std::numeric_limits<double>::infinity();
  std::vector<float> tau;
  for (int round = 0; round < kMaxRounds; ++round) {
    joint_pass(p, st.book, p.size, st, tau);
    for (int k = 0; k < 2; ++k) {
      update_centroids(p, tau, st);
      update_base(p, st);
    }
    const double e = error_of(p, st);
    out.rounds = round + 1;
    const bool better = e < best_error;
    const bool enough = better && best_error - e > kMinGain * best_error;
    if (better) {
      best = st;
      best_error = e;
    }
    if (!enough) break;
  }
  const int64_t groups = p.cols / kGroup;
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t g = 0; g < groups; ++g)
      canonicalize_grid4(best.base.codes.data() + r * p.cols + g * kGroup, kGroup,
                         best.base.scales[size_t(r * groups + g)]);
  out.residual = stored(p, best);
  out.base = std::move(best.base);
  out.error = best_error;
  return out;
}

}  // namespace bonsai::quant
