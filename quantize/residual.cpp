#include "quantize/residual.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/gptq.h"
#include "quantize/kmeans.h"

namespace bonsai::quant {
namespace {

constexpr int64_t kPatternSize = 4;

template <typename... Args>
[[noreturn]] void bad(const Args&... what) {
  throw Error(cat("quantize: residual: ", what...));
}

std::vector<uint16_t> to_fp16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_fp16(v[i]);
  return h;
}

// Unit weights where the calibration says nothing (no statistics, or none for these inputs).
std::vector<float> weights_of(const MatrixIn& in) {
  std::vector<float> a(size_t(in.cols), 1.0f);
  if (in.importance && std::any_of(in.importance, in.importance + in.cols, [](float v) { return v > 0.0f; }))
    std::copy_n(in.importance, in.cols, a.begin());
  return a;
}

// Assigns every row's sub-vectors left to right: `choose(row, p, target, weights, recon)` picks
// the stored reconstruction of sub-vector p (returns its index, writes its dim values to recon).
// With a Gram matrix the choice is followed by GPTQ's error feedback: the rounding error of each
// column goes onto the row's later columns through U (the factor of the damped H⁻¹), so later
// choices compensate earlier ones in the output-error metric ‖X(R − R̂)ᵀ‖² rather than in the
// diagonal one (which, for a GPTQ base whose residual is itself compensating, makes the output
// error worse). Weights: 1/U_jj² with feedback (the error each column leaves), else E[x²].
template <typename Choose>
void assign_rows(const MatrixIn& in, const std::vector<float>& r, const std::vector<float>& a, int64_t dim, int bits,
                 std::vector<uint8_t>& index, Choose&& choose) {
  const int64_t cols = in.cols, per_row = cols / dim;
  const uint64_t rb = index_row_bytes(per_row, bits);
  index.assign(size_t(uint64_t(in.rows) * rb), 0);
  const std::vector<float> u = in.gram ? gptq_inverse_factor(in, MethodOptions{}.gptq_damp) : std::vector<float>{};
  std::vector<float> w = a;
  if (!u.empty())
    for (int64_t j = 0; j < cols; ++j) w[size_t(j)] = 1.0f / (u[size_t(j * cols + j)] * u[size_t(j * cols + j)]);
#pragma omp parallel
  {
    std::vector<float> t(static_cast<size_t>(cols)), recon(static_cast<size_t>(dim));
    std::vector<uint32_t> idx(static_cast<size_t>(per_row));
#pragma omp for schedule(dynamic, 4)
    for (int64_t row = 0; row < in.rows; ++row) {
      std::copy_n(r.data() + row * cols, cols, t.begin());
      for (int64_t p = 0; p < per_row; ++p) {
        idx[size_t(p)] = choose(row, p, t.data() + p * dim, w.data() + p * dim, recon.data());
        if (u.empty()) continue;
        for (int64_t k = 0; k < dim; ++k) {
          const int64_t j = p * dim + k;
          const float* uj = u.data() + j * cols;
          const float e = (t[size_t(j)] - recon[size_t(k)]) / uj[j];
          for (int64_t jj = j + 1; jj < cols; ++jj) t[size_t(jj)] -= e * uj[jj];
        }
      }
      pack_indices(idx.data(), per_row, bits, index.data() + uint64_t(row) * rb);
    }
  }
}

ResidualFit fit_kmeans(const MatrixIn& in, const std::vector<float>& r, const ResidualOptions& o) {
  const int64_t g = o.rows == 0 ? in.rows : o.rows;
  if (g <= 0 || in.rows % g != 0)
    bad("--rc-rows ", o.rows, " does not divide the ", in.rows, " rows of the matrix (0 = all rows)");
  ResidualFit f;
  f.scheme = ResidualScheme::kmeans;
  f.dim = o.dim;
  f.size = o.size;
  f.books = in.rows / g;
  const int64_t per_row = in.cols / o.dim;
  const std::vector<float> a = weights_of(in);
  std::vector<float> books;  // fp16-rounded, as stored
  for (int64_t b = 0; b < f.books; ++b) {
    Points p;
    p.dim = o.dim;
    p.n = g * per_row;
    p.x.assign(r.begin() + b * g * in.cols, r.begin() + (b + 1) * g * in.cols);  // rows are whole sub-vectors
    p.w.resize(size_t(p.n));
    for (int64_t i = 0; i < p.n; ++i) p.w[size_t(i)] = a.data() + (i % per_row) * o.dim;
    std::vector<float> c = kmeans(p, std::min(o.size, p.n), o.iterations, o.seed + uint64_t(b));
    c.resize(size_t(o.size * o.dim), 0.0f);
    books.insert(books.end(), c.begin(), c.end());
  }
  f.codebook = to_fp16(books);
  assign_rows(in, r, a, o.dim, index_bits(o.size), f.index,
              [&](int64_t row, int64_t, const float* x, const float* w, float* recon) {
                const float* book = books.data() + (row / g) * o.size * o.dim;
                int64_t best = 0;
                double bd = std::numeric_limits<double>::infinity();
                for (int64_t k = 0; k < o.size; ++k) {
                  const double d = weighted_dist(x, w, book + k * o.dim, o.dim);
                  if (d < bd) bd = d, best = k;
                }
                std::copy_n(book + best * o.dim, o.dim, recon);
                return uint32_t(best);
              });
  return f;
}

// (μ, σ) minimising Σ a (x − μ − σc)², rounded to fp16; returns the error with the rounded pair.
double fit_affine(const float* x, const float* a, const float* c, int64_t n, uint16_t* mu, uint16_t* sigma) {
  double sa = 0, sc = 0, scc = 0, sx = 0, scx = 0;
  for (int64_t k = 0; k < n; ++k) {
    sa += a[k];
    sc += double(a[k]) * c[k];
    scc += double(a[k]) * c[k] * c[k];
    sx += double(a[k]) * x[k];
    scx += double(a[k]) * c[k] * x[k];
  }
  const double det = sa * scc - sc * sc;
  double m = sa > 0 ? sx / sa : 0.0, s = 0.0;
  if (det > 1e-12 * sa * scc) {
    m = (scc * sx - sc * scx) / det;
    s = (sa * scx - sc * sx) / det;
  }
  *mu = f32_to_fp16(float(m));
  *sigma = f32_to_fp16(float(s));
  const float mf = fp16_to_f32(*mu), sf = fp16_to_f32(*sigma);
  if (!std::isfinite(mf) || !std::isfinite(sf)) *mu = *sigma = 0;
  double e = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    const double d = double(x[k]) - fp16_to_f32(*mu) - double(fp16_to_f32(*sigma)) * c[k];
    e += a[k] * d * d;
  }
  return e;
}

ResidualFit fit_pattern(const MatrixIn& in, const std::vector<float>& r, const ResidualOptions& o) {
  ResidualFit f;
  f.scheme = ResidualScheme::pattern;
  f.dim = kRcGroup;
  f.size = kPatternSize;
  f.books = 1;
  const int64_t groups = in.cols / kRcGroup;
  const std::vector<float> a = weights_of(in);
  Points p;
  p.dim = kRcGroup;
  p.n = in.rows * groups;
  p.x.resize(r.size());
  p.w.resize(size_t(p.n));
  for (int64_t i = 0; i < p.n; ++i) {
    const float* x = r.data() + i * kRcGroup;
    double mean = 0, sq = 0;
    for (int64_t k = 0; k < kRcGroup; ++k) mean += x[k];
    mean /= double(kRcGroup);
    for (int64_t k = 0; k < kRcGroup; ++k) sq += (x[k] - mean) * (x[k] - mean);
    const double sd = std::sqrt(sq / double(kRcGroup));
    for (int64_t k = 0; k < kRcGroup; ++k) p.x[size_t(i * kRcGroup + k)] = sd > 0 ? float((x[k] - mean) / sd) : 0.0f;
    p.w[size_t(i)] = a.data() + (i % groups) * kRcGroup;
  }
  const std::vector<float> c = kmeans(p, kPatternSize, o.iterations, o.seed);
  f.codebook = to_fp16(c);
  f.params.assign(size_t(p.n * 2), 0);
  assign_rows(in, r, a, kRcGroup, index_bits(kPatternSize), f.index,
              [&](int64_t row, int64_t gi, const float* x, const float* w, float* recon) {
                // The best of the four patterns with its own (μ, σ); "no residual" (μ = σ = 0) competes.
                double best = 0.0;
                for (int64_t k = 0; k < kRcGroup; ++k) best += double(w[k]) * x[k] * x[k];
                uint16_t bm = 0, bs = 0;
                uint32_t bi = 0;
                for (int64_t q = 0; q < kPatternSize; ++q) {
                  uint16_t m, s;
                  const double e = fit_affine(x, w, c.data() + q * kRcGroup, kRcGroup, &m, &s);
                  if (e < best) best = e, bm = m, bs = s, bi = uint32_t(q);
                }
                const size_t i = size_t(row * groups + gi);
                f.params[2 * i] = bm;
                f.params[2 * i + 1] = bs;
                const float mu = fp16_to_f32(bm), sigma = fp16_to_f32(bs);
                for (int64_t k = 0; k < kRcGroup; ++k) recon[k] = mu + sigma * c[size_t(bi * kRcGroup + k)];
                return bi;
              });
  return f;
}

}  // namespace

ResidualKind parse_residual(const std::string& s) {
  if (s == "none") return ResidualKind::none;
  if (s == "kmeans") return ResidualKind::kmeans;
  if (s == "pattern") return ResidualKind::pattern;
  bad("unknown residual '", s, "' (known: none, kmeans, pattern)");
}

const char* residual_kind_name(ResidualKind k) {
  return k == ResidualKind::kmeans ? "kmeans" : k == ResidualKind::pattern ? "pattern" : "none";
}

void validate_residual(const ResidualOptions& o) {
  if (o.kind != ResidualKind::kmeans) return;
  if (const std::string p = kmeans_options_problem(o.dim, o.size, o.rows); !p.empty()) bad(p);
  if (o.iterations < 1) bad("k-means iterations ", o.iterations, " must be >= 1");
}

ResidualFit fit_residual(const MatrixIn& in, const std::vector<float>& w_hat, const ResidualOptions& o) {
  validate_residual(o);
  if (o.kind == ResidualKind::none) bad("fit_residual called with --residual none");
  if (in.cols % kRcGroup != 0 || w_hat.size() != size_t(in.rows * in.cols))
    bad("a ", in.rows, " x ", in.cols, " matrix with ", w_hat.size(), " quantized weights (cols a multiple of 128)");
  std::vector<float> r(w_hat.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = in.w[i] - w_hat[i];
  return o.kind == ResidualKind::pattern ? fit_pattern(in, r, o) : fit_kmeans(in, r, o);
}

void write_residual_keys(const ResidualOptions& o, Metadata& meta) {
  bonsai::write_residual_keys(o.kind == ResidualKind::pattern ? ResidualScheme::pattern : ResidualScheme::kmeans, o.dim,
                              o.size, o.rows, meta);
}

std::vector<float> residual_values(const ResidualFit& f, int64_t rows, int64_t cols) {
  TensorSet ts;
  ts.path = "(residual fit)";
  Tensor base;
  base.name = "w";
  base.ne = {cols, rows};
  for (Tensor& t : f.tensors(base, ts)) ts.add(std::move(t));
  ResidualView v;
  if (!find_residual(ts, base, &v)) bad("no residual tensors made");
  return v.dequantize();
}

}  // namespace bonsai::quant
