#include "quantize/kmeans.h"

#include <algorithm>
#include <limits>
#include <random>

#include "formats/fp16.h"

namespace bonsai::quant {

double weighted_dist(const float* x, const float* w, const float* c, int64_t dim) {
  double s = 0.0;
  for (int64_t k = 0; k < dim; ++k) {
    const double d = double(x[k]) - double(c[k]);
    s += double(w[k]) * d * d;
  }
  return s;
}

namespace {

int64_t nearest(const Points& p, int64_t i, const std::vector<float>& c, int64_t size) {
  const float* x = p.x.data() + i * p.dim;
  int64_t best = 0;
  double bd = std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k < size; ++k) {
    const double d = weighted_dist(x, p.w[size_t(i)], c.data() + k * p.dim, p.dim);
    if (d < bd) bd = d, best = k;
  }
  return best;
}

}  // namespace

std::vector<float> kmeans(const Points& p, int64_t size, int iterations, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> c(size_t(size * p.dim), 0.0f);
  std::vector<double> d2(size_t(p.n), std::numeric_limits<double>::infinity());
  int64_t pick = int64_t(rng() % uint64_t(p.n));
  for (int64_t k = 0; k < size; ++k) {
    std::copy_n(p.x.data() + pick * p.dim, p.dim, c.data() + k * p.dim);
    double total = 0.0;
    for (int64_t i = 0; i < p.n; ++i) {
      d2[size_t(i)] = std::min(d2[size_t(i)], weighted_dist(p.x.data() + i * p.dim, p.w[size_t(i)], c.data() + k * p.dim, p.dim));
      total += d2[size_t(i)];
    }
    if (!(total > 0.0)) break;  // every point is a centroid already: the rest stay at zero
    double u = std::uniform_real_distribution<double>(0.0, total)(rng);
    pick = p.n - 1;
    for (int64_t i = 0; i < p.n; ++i)
      if ((u -= d2[size_t(i)]) <= 0.0) {
        pick = i;
        break;
      }
  }
  std::vector<int64_t> assign(size_t(p.n), -1);
  std::vector<double> num, den;
  for (int it = 0; it < iterations; ++it) {
    bool changed = false;
#pragma omp parallel for schedule(static) reduction(|| : changed)
    for (int64_t i = 0; i < p.n; ++i) {
      const int64_t a = nearest(p, i, c, size);
      changed = changed || a != assign[size_t(i)];
      assign[size_t(i)] = a;
    }
    if (!changed) break;
    num.assign(size_t(size * p.dim), 0.0);
    den.assign(size_t(size * p.dim), 0.0);
    for (int64_t i = 0; i < p.n; ++i) {
      const int64_t a = assign[size_t(i)];
      for (int64_t k = 0; k < p.dim; ++k) {
        num[size_t(a * p.dim + k)] += double(p.w[size_t(i)][k]) * p.x[size_t(i * p.dim + k)];
        den[size_t(a * p.dim + k)] += double(p.w[size_t(i)][k]);
      }
    }
    for (size_t j = 0; j < c.size(); ++j)
      if (den[j] > 0.0) c[j] = float(num[j] / den[j]);  // an empty coordinate keeps its value
  }
  for (float& v : c) v = fp16_to_f32(f32_to_fp16(v));
  return c;
}

}  // namespace bonsai::quant
