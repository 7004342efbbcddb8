// Stage 2's four-level grid: never worse than the stage-1 start, local optimality checked against
// exhaustive search on small groups, canonical blocks that re-encode to the same bytes through the
// formats decoder, code +2 in the packing, the grid inside GPTQ.
#include "quantize/grid4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/group_fit.h"
#include "synthetic.h"

namespace bonsai::quant {
namespace {

using test::Dist;

constexpr Method kPerGroup[] = {Method::rtn, Method::absmean, Method::optimal};

// Heavy-tailed weights with the Gram matrix of correlated inputs (the fourth level gets used).
struct Layer {
  int64_t rows, cols;
  std::vector<float> w, a;
  std::vector<double> g;
  MatrixIn in;
  Layer(int64_t rows_, int64_t cols_, int64_t samples, double mixing, uint32_t seed) : rows(rows_), cols(cols_) {
    w = test::random_weights(rows, cols, Dist::heavy, seed);
    g = test::gram_of(test::correlated_inputs(samples, cols, mixing, seed + 1), samples, cols);
    a = test::diagonal(g, cols);
    in = MatrixIn{w.data(), rows, cols, a.data(), g.data()};
  }
};

MethodOptions four_levels() {
  MethodOptions o;
  o.four_levels = true;
  return o;
}

uint16_t stage1(Method m, const float* w, const float* a, int64_t n, int8_t* c) {
  switch (m) {
    case Method::rtn: return fit_rtn(w, n, c);
    case Method::absmean: return fit_absmean(w, n, c);
    default: return fit_optimal(w, a, n, c);
  }
}

double error_of(const std::vector<float>& w, const std::vector<float>& a, const std::vector<int8_t>& c, uint16_t d) {
  return weighted_error(w.data(), a.data(), int64_t(w.size()), c.data(), fp16_to_f32(d));
}

TEST(Grid4, NearestLevel) {
  EXPECT_EQ(code_for_grid4(0.49f, 1.0f), 0);
  EXPECT_EQ(code_for_grid4(0.5f, 1.0f), 0);  // ties to the smaller |code|
  EXPECT_EQ(code_for_grid4(0.51f, 1.0f), 1);
  EXPECT_EQ(code_for_grid4(1.5f, 1.0f), 1);
  EXPECT_EQ(code_for_grid4(1.51f, 1.0f), 2);
  EXPECT_EQ(code_for_grid4(9.0f, 1.0f), 2);
  EXPECT_EQ(code_for_grid4(-9.0f, 1.0f), -1);
  EXPECT_EQ(code_for_grid4(-9.0f, -1.0f), 2);  // a negative d mirrors the grid
  EXPECT_EQ(code_for_grid4(9.0f, -1.0f), -1);
  EXPECT_EQ(code_for_grid4(9.0f, 0.0f), 0);
}

// Per group and for every per-group method: the refined error is at most the stage-1 error on the
// same importance, and the result is canonical (re-encodes to itself).
TEST(Grid4, NeverWorseThanTheStage1Start) {
  int improved = 0, groups = 0;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    const auto w = test::random_weights(1, kGroup, seed % 2 ? Dist::heavy : Dist::normal, seed);
    auto a = test::random_importance(kGroup, 1000 + seed);
    if (seed % 7 == 0) a.assign(a.size(), 0.0f);  // never-seen inputs: unit importance, as stage 1
    const std::vector<float> ones(size_t(kGroup), 1.0f);
    const auto& used = seed % 7 == 0 ? ones : a;
    for (const Method m : kPerGroup) {
      std::vector<int8_t> c(kGroup);
      const uint16_t d1 = stage1(m, w.data(), a.data(), kGroup, c.data());
      const double e1 = error_of(w, used, c, d1);
      const uint16_t d2 = refine_grid4(w.data(), a.data(), kGroup, c.data(), d1);
      const double e2 = error_of(w, used, c, d2);
      EXPECT_LE(e2, e1) << method_name(m) << " seed " << seed;
      improved += e2 < e1;
      ++groups;
      std::vector<float> y(kGroup);
      for (int64_t j = 0; j < kGroup; ++j) y[size_t(j)] = float(c[size_t(j)]) * fp16_to_f32(d2);
      std::vector<int8_t> c2(kGroup);
      EXPECT_EQ(reencode_grid4(y.data(), kGroup, c2.data()), d2);
      EXPECT_EQ(c2, c);
    }
  }
  // The fourth level is worth something on most groups (rtn and absmean leave the most).
  EXPECT_GT(improved, groups / 2);
}

// The global optimum over {−1,0,1,2}^n × fp16 scales of either sign, by exhaustive search; for a
// fixed code vector the error is quadratic in d, least at the fp16 neighbours of Σawc/Σac².
double exhaustive_best(const std::vector<float>& w, const std::vector<float>& a) {
  const int n = int(w.size());
  int total = 1;
  for (int i = 0; i < n; ++i) total *= 4;
  std::vector<int8_t> c(static_cast<size_t>(n));
  double best = error_of(w, a, std::vector<int8_t>(size_t(n), 0), 0);
  for (int v = 0; v < total; ++v) {
    double num = 0.0, den = 0.0;
    for (int j = 0, x = v; j < n; ++j, x /= 4) {
      c[size_t(j)] = int8_t(x % 4 - 1);
      num += double(a[size_t(j)]) * double(w[size_t(j)]) * c[size_t(j)];
      den += double(a[size_t(j)]) * c[size_t(j)] * c[size_t(j)];
    }
    if (den <= 0.0) continue;
    const double s = num / den;
    const int h0 = f32_to_fp16(float(std::fabs(s))) & 0x7fff;
    for (int h = std::max(h0 - 2, 1); h <= h0 + 2; ++h)
      best = std::min(best, error_of(w, a, c, uint16_t(h | (s < 0 ? 0x8000 : 0))));
  }
  return best;
}

// On small groups: the result lies between the exhaustive optimum and the stage-1 start, and it
// is a fixed point of Lloyd — no single code and no single fp16 step of the scale lowers it.
TEST(Grid4, LocalOptimumCheckedExhaustivelyOnSmallGroups) {
  int global = 0, trials = 0;
  for (uint32_t trial = 0; trial < 40; ++trial) {
    const int n = 5 + int(trial % 4);  // 4^8 code vectors at most
    const auto w = test::random_weights(1, n, trial % 2 ? Dist::heavy : Dist::normal, 300 + trial);
    const auto a = test::random_importance(n, 400 + trial);
    std::vector<int8_t> c(static_cast<size_t>(n));
    const uint16_t d1 = fit_optimal(w.data(), a.data(), n, c.data());
    const double e1 = error_of(w, a, c, d1);
    const uint16_t d = refine_grid4(w.data(), a.data(), n, c.data(), d1);
    const double e = error_of(w, a, c, d);
    const double best = exhaustive_best(w, a);
    EXPECT_LE(e, e1) << trial;
    EXPECT_GE(e, best * (1 - 1e-12)) << trial;
    global += e <= best * (1 + 1e-9);
    ++trials;
    for (int j = 0; j < n; ++j)
      for (int8_t k = -1; k <= 2; ++k) {
        auto c2 = c;
        c2[size_t(j)] = k;
        EXPECT_GE(error_of(w, a, c2, d), e * (1 - 1e-12)) << trial << " code " << j << " -> " << int(k);
      }
    for (const int step : {-1, 1}) {
      const int mag = (d & 0x7fff) + step;
      if (mag >= 1 && mag <= 0x7bff) {
        EXPECT_GE(error_of(w, a, c, uint16_t(mag | (d & 0x8000))), e * (1 - 1e-12)) << trial;
      }
    }
  }
  // Lloyd is a local method; on groups this small it should still find the optimum most times.
  EXPECT_GT(global, trials / 2);
}

// Every code vector of a small group under several scales of both signs (normal, subnormal):
// canonicalizing keeps every decoded value, and the decoded values re-encode to the canonical form.
TEST(Grid4, CanonicalFormReencodesExhaustively) {
  const int n = 5;
  const float scales[] = {0.0f, 0.013f, -0.013f, 1.0f, -2.5f, 3e-7f, -6e-8f, 30000.0f};
  for (const float s : scales) {
    const uint16_t h = f32_to_fp16(s);
    for (int v = 0; v < 1024; ++v) {
      std::vector<int8_t> c(n);
      for (int j = 0, x = v; j < n; ++j, x /= 4) c[size_t(j)] = int8_t(x % 4 - 1);
      std::vector<float> y0(n), y1(n), y2(n);
      for (int j = 0; j < n; ++j) y0[size_t(j)] = float(c[size_t(j)]) * fp16_to_f32(h);
      uint16_t d = h;
      canonicalize_grid4(c.data(), n, d);
      for (int j = 0; j < n; ++j) y1[size_t(j)] = float(c[size_t(j)]) * fp16_to_f32(d);
      for (int j = 0; j < n; ++j) ASSERT_EQ(y1[size_t(j)] == 0.0f ? 0.0f : y1[size_t(j)], y0[size_t(j)] == 0.0f ? 0.0f : y0[size_t(j)]) << s << " " << v;
      std::vector<int8_t> c2(n);
      const uint16_t d2 = reencode_grid4(y1.data(), n, c2.data());
      ASSERT_EQ(d2, d) << s << " " << v;
      ASSERT_EQ(c2, c) << s << " " << v;
    }
  }
}

// The matrix path: packed PQ2_0, decoded by formats (the golden-tested decoder), re-encoded
// canonically group by group, packed again: the same bytes; stage-2 error at most stage-1's.
TEST(Grid4, Pq2DecodeReencodeIsByteIdentical) {
  const Layer l(24, 512, 600, 1.0, 21);
  const auto& [rows, cols, w, a, g, in] = l;
  const MethodOptions four = four_levels();
  for (const Method m : {Method::rtn, Method::absmean, Method::optimal, Method::gptq}) {
    const TernaryMatrix q = quantize_ternary(in, m, four);
    EXPECT_GT(share_of_plus2(q), 0.0) << method_name(m);
    const auto bytes = q.pack(TypeId::PQ2_0);
    std::vector<float> y(w.size());
    traits(TypeId::PQ2_0).to_float(bytes.data(), y.data(), int64_t(y.size()));
    EXPECT_EQ(y, q.dequantize()) << method_name(m);
    TernaryMatrix back = q;
    for (size_t b = 0; b < back.scales.size(); ++b)
      back.scales[b] = reencode_grid4(y.data() + b * kGroup, kGroup, back.codes.data() + b * kGroup);
    EXPECT_EQ(back.pack(TypeId::PQ2_0), bytes) << method_name(m);
    if (m != Method::gptq) {
      const TernaryMatrix t = quantize_ternary(in, m);
      EXPECT_LE(relative_output_error(MatrixIn{w.data(), rows, cols, a.data()}, q.dequantize()),
                relative_output_error(MatrixIn{w.data(), rows, cols, a.data()}, t.dequantize()))
          << method_name(m);
      EXPECT_EQ(refine_grid4(MatrixIn{w.data(), rows, cols, a.data()}, t).codes, q.codes) << method_name(m);
    }
    // Ternary's packing has no fourth level.
    if (share_of_plus2(q) > 0.0) {
      EXPECT_THROW(q.pack(TypeId::PTQ1_0), Error);
    }
  }
}

// The grid inside GPTQ's error feedback lowers the output error against ternary GPTQ on
// correlated inputs with heavy-tailed weights (where the fourth level is used).
TEST(Grid4, GptqOnTheGridBeatsTernaryGptq) {
  const Layer l(32, 384, 800, 1.5, 31);
  const MatrixIn& in = l.in;
  const MethodOptions four = four_levels();
  const double e3 = relative_output_error(in, quantize_ternary(in, Method::gptq).dequantize());
  const TernaryMatrix q4 = quantize_ternary(in, Method::gptq, four);
  const double e4 = relative_output_error(in, q4.dequantize());
  EXPECT_LT(e4, e3);
  for (const int8_t c : q4.codes) ASSERT_TRUE(c >= -1 && c <= 2);
}

TEST(Grid4, StageOneShapeMismatchIsAnError) {
  const auto w = test::random_weights(2, kGroup, Dist::normal, 1);
  TernaryMatrix t;
  t.rows = 1;
  t.cols = kGroup;
  t.codes.assign(kGroup, 0);
  t.scales.assign(1, 0);
  EXPECT_THROW(refine_grid4(MatrixIn{w.data(), 2, kGroup}, t), Error);
}

}  // namespace
}  // namespace bonsai::quant
