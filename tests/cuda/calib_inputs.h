// Inputs for the GPU calibration tests: activations as a layer's are (correlated columns, uneven
// scales, nonzero means) and the statistics InputStats::add makes of them, cheap enough to draw
// at the tests' sizes.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "calibrate/stats.h"

namespace bonsai::test {

// n rows of cols: x_tj = s_j·(Σ_k z_tk B_kj + ε_tj + m_j), k over 16 shared factors, s_j
// log-normal, m_j a mean offset per column. Full rank (the ε) for n ≥ cols. Row-major.
inline std::vector<float> layer_inputs(int64_t n, int64_t cols, uint32_t seed) {
  constexpr int64_t kFactors = 16;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::lognormal_distribution<float> scale(0.0f, 0.8f);
  std::vector<float> b(size_t(kFactors * cols)), s(static_cast<size_t>(cols)), m(static_cast<size_t>(cols));
  for (float& v : b) v = normal(rng);
  for (float& v : s) v = scale(rng);
  for (float& v : m) v = 0.5f * normal(rng);
  std::vector<float> x(size_t(n * cols));
  std::vector<float> z(static_cast<size_t>(kFactors));
  for (int64_t t = 0; t < n; ++t) {
    for (float& v : z) v = normal(rng);
    for (int64_t j = 0; j < cols; ++j) {
      float v = m[size_t(j)] + normal(rng);
      for (int64_t k = 0; k < kFactors; ++k) v += z[size_t(k)] * b[size_t(k * cols + j)];
      x[size_t(t * cols + j)] = s[size_t(j)] * v;
    }
  }
  return x;
}

// InputStats::add's statistics of those rows, Gram matrix included.
inline calib::InputStats cpu_stats(const std::vector<float>& x, int64_t n, int64_t cols) {
  calib::InputStats st;
  st.cols = cols;
  st.gram.assign(size_t(cols * cols), 0.0);
  st.add(x.data(), n);
  return st;
}

}  // namespace bonsai::test
