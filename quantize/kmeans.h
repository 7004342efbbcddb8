// Importance-weighted k-means, the codebook fit of the residual schemes (quantize/residual.h):
// distance Σ_k w_k (x_k − c_k)², k-means++ start (seeded), Lloyd until no assignment changes.
#pragma once
#include <cstdint>
#include <vector>

namespace bonsai::quant {

// Vectors of one k-means problem: x[i] (dim floats) with per-coordinate weights w[i] (dim floats,
// pointing into the importance; the same few rows repeat, so no copy).
struct Points {
  int64_t n = 0, dim = 0;
  std::vector<float> x;
  std::vector<const float*> w;
};

double weighted_dist(const float* x, const float* w, const float* c, int64_t dim);

// `size` centroids (size × dim floats) after at most `iterations` Lloyd steps, rounded to fp16
// (what is stored). Centroids beyond the number of distinct points stay at zero.
std::vector<float> kmeans(const Points& p, int64_t size, int iterations, uint64_t seed);

}  // namespace bonsai::quant
