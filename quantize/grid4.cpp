#include "quantize/grid4.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/group_rules.h"

namespace bonsai::quant {

void canonicalize_grid4(int8_t* codes, int64_t n, uint16_t& d) { rules::canonicalize_grid4(codes, n, d); }

uint16_t refine_grid4(const float* w, const float* a, int64_t n, int8_t* codes, uint16_t d) {
  std::vector<int8_t> scratch(size_t(2 * n));
  return rules::refine_grid4(w, a, n, codes, d, scratch.data());
}

uint16_t reencode_grid4(const float* y, int64_t n, int8_t* codes) {
  float m = 0.0f, top = 0.0f;
  for (int64_t j = 0; j < n; ++j)
    if (std::fabs(y[j]) > m) m = std::fabs(y[j]), top = y[j];
  bool ternary = true;
  for (int64_t j = 0; j < n; ++j) ternary &= y[j] == 0.0f || std::fabs(y[j]) == m;
  const float d = m == 0.0f ? 0.0f : ternary ? m : top / 2.0f;
  const uint16_t h = f32_to_fp16(d);
  const float df = fp16_to_f32(h);
  for (int64_t j = 0; j < n; ++j)
    codes[j] = df == 0.0f ? int8_t{0} : int8_t(std::clamp(std::lround(y[j] / df), -1L, 2L));
  return h;
}

TernaryMatrix refine_grid4(const MatrixIn& in, const TernaryMatrix& stage1) {
  if (stage1.rows != in.rows || stage1.cols != in.cols || stage1.codes.size() != size_t(in.rows * in.cols) ||
      stage1.scales.size() != size_t(in.rows * (in.cols / kGroup)))
    throw Error(cat("quantize: stage 2 given a stage-1 result of ", stage1.rows, " x ", stage1.cols, " for a ", in.rows,
                    " x ", in.cols, " matrix"));
  TernaryMatrix out = stage1;
  const int64_t groups = in.cols / kGroup;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const size_t o = size_t(r * in.cols + g * kGroup), b = size_t(r * groups + g);
      out.scales[b] = refine_grid4(in.w + o, in.importance ? in.importance + g * kGroup : nullptr, kGroup,
                                   out.codes.data() + o, out.scales[b]);
    }
  return out;
}

double share_of_plus2(const TernaryMatrix& m) {
  if (m.codes.empty()) return 0.0;
  const auto n = std::count(m.codes.begin(), m.codes.end(), int8_t{2});
  return double(n) / double(m.codes.size());
}

}  // namespace bonsai::quant
