#include "runtime/cpu/residual.h"

#include <vector>

#include "formats/fp16.h"
#include "runtime/cpu/parallel.h"

namespace bonsai::cpu {

void residual_matmul(const ResidualView& r, const float* x, int64_t n, float* y) {
  const int64_t per_row = r.cols / r.dim, g = r.rows_per_book();
  const bool pattern = r.scheme == ResidualScheme::pattern;
  std::vector<float> centroids(size_t(r.size * r.dim)), lut(size_t(per_row * r.size)), xsum(static_cast<size_t>(per_row));
  for (int64_t b = 0; b < r.books; ++b) {
    const uint16_t* book = r.codebook + b * r.size * r.dim;
    for (size_t i = 0; i < centroids.size(); ++i) centroids[i] = fp16_to_f32(book[i]);
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x + t * r.cols;
      // lut[p][k] = centroid k · sub-vector p of x (p-major: a row's gathers stay in one stripe).
      for (int64_t p = 0; p < per_row; ++p) {
        const float* xp = xt + p * r.dim;
        float s = 0.0f;
        for (int64_t j = 0; j < r.dim; ++j) s += xp[j];
        xsum[size_t(p)] = s;
        for (int64_t k = 0; k < r.size; ++k) {
          const float* c = centroids.data() + k * r.dim;
          float d = 0.0f;
          for (int64_t j = 0; j < r.dim; ++j) d += c[j] * xp[j];
          lut[size_t(p * r.size + k)] = d;
        }
      }
      float* yt = y + t * r.rows;
#pragma omp parallel for schedule(static) if (g * per_row >= kParallelWork)
      for (int64_t row = b * g; row < (b + 1) * g; ++row) {
        const uint8_t* idx = r.indices + uint64_t(row) * r.row_bytes;
        float s = 0.0f;
        if (pattern) {
          const uint16_t* ms = r.params + row * per_row * 2;
          for (int64_t p = 0; p < per_row; ++p)
            s += fp16_to_f32(ms[2 * p]) * xsum[size_t(p)] +
                 fp16_to_f32(ms[2 * p + 1]) * lut[size_t(p * r.size + index_at(idx, p, r.bits))];
        } else if (r.bits == 8) {  // the common byte-wide index: no bit extraction
          for (int64_t p = 0; p < per_row; ++p) s += lut[size_t(p * r.size + idx[p])];
        } else {
          for (int64_t p = 0; p < per_row; ++p) s += lut[size_t(p * r.size + index_at(idx, p, r.bits))];
        }
        yt[row] += s;
      }
    }
  }
}

void residual_matmul_ref(const ResidualView& r, const float* x, int64_t n, float* y) {
  const std::vector<float> rh = r.dequantize();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t row = 0; row < r.rows; ++row) {
      double s = 0.0;
      for (int64_t k = 0; k < r.cols; ++k) s += double(rh[size_t(row * r.cols + k)]) * double(x[t * r.cols + k]);
      y[t * r.rows + row] += float(s);
    }
}

}  // namespace bonsai::cpu
