// Synthetic weights and calibration statistics for the quantizer tests: reproducible (fixed
// seeds), with the shapes real layers have (heavy tails, uneven column importance, correlated
// inputs).
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace bonsai::quant::test {

enum class Dist { normal, heavy };

// rows × cols weights of typical LLM size (σ 0.02); `heavy` is Student-t with 3 degrees of
// freedom (outliers several σ out, as real weight rows have).
inline std::vector<float> random_weights(int64_t rows, int64_t cols, Dist dist, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::student_t_distribution<float> t3(3.0f);
  std::vector<float> w(size_t(rows * cols));
  for (float& x : w) x = dist == Dist::normal ? normal(rng) : 0.012f * t3(rng);
  return w;
}

// Log-normal per-column E[x²] (spread over about two decades, like activation statistics).
inline std::vector<float> random_importance(int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<float> ln(0.0f, 1.2f);
  std::vector<float> a(static_cast<size_t>(cols));
  for (float& x : a) x = ln(rng);
  return a;
}

// Inputs X = Z·A (n × cols) with Z standard normal and A = I + c·(random mixing): correlated
// columns, as a layer's inputs are. Row-major.
inline std::vector<double> correlated_inputs(int64_t n, int64_t cols, double mixing, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> a(size_t(cols * cols));
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) a[size_t(i * cols + j)] = (i == j ? 1.0 : 0.0) + mixing * normal(rng) / std::sqrt(double(cols));
  std::vector<double> z(size_t(n * cols)), x(size_t(n * cols), 0.0);
  for (double& v : z) v = normal(rng);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < cols; ++k) {
      const double zk = z[size_t(t * cols + k)];
      for (int64_t j = 0; j < cols; ++j) x[size_t(t * cols + j)] += zk * a[size_t(k * cols + j)];
    }
  return x;
}

// E[x xᵀ] of n rows of cols.
inline std::vector<double> gram_of(const std::vector<double>& x, int64_t n, int64_t cols) {
  std::vector<double> g(size_t(cols * cols), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < cols; ++i) {
      const double xi = x[size_t(t * cols + i)];
      for (int64_t j = 0; j < cols; ++j) g[size_t(i * cols + j)] += xi * x[size_t(t * cols + j)];
    }
  for (double& v : g) v /= double(n);
  return g;
}

// Σ s_i s_j ρ^|i−j|: a positive definite Gram matrix with strongly correlated neighbouring inputs
// and uneven scales, built in O(cols²) (for sizes where sampling inputs would be slow).
inline std::vector<double> ar1_gram(int64_t cols, double rho, uint32_t seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> ln(0.0, 0.6);
  std::vector<double> s(static_cast<size_t>(cols));
  for (double& v : s) v = ln(rng);
  std::vector<double> pw(static_cast<size_t>(cols));
  pw[0] = 1.0;
  for (int64_t k = 1; k < cols; ++k) pw[size_t(k)] = pw[size_t(k - 1)] * rho;
  std::vector<double> g(size_t(cols * cols));
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) g[size_t(i * cols + j)] = s[size_t(i)] * s[size_t(j)] * pw[size_t(std::llabs(i - j))];
  return g;
}

inline std::vector<float> diagonal(const std::vector<double>& g, int64_t cols) {
  std::vector<float> d(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) d[size_t(j)] = float(g[size_t(j * cols + j)]);
  return d;
}

}  // namespace bonsai::quant::test
