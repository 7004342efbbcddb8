// The per-group rules against exhaustive search and against each other.
#include "quantize/group_fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "formats/fp16.h"
#include "synthetic.h"

namespace bonsai::quant {
namespace {

using test::Dist;

struct Best {
  double real = std::numeric_limits<double>::infinity();  // over real scales
  double stored = std::numeric_limits<double>::infinity();  // over fp16 scales
};

// Every code vector in {-1,0,1}^n; for each, its least error over real scales (closed form) and
// over fp16 scales (the fp16 neighbours of the real optimum; the error is quadratic in d).
Best exhaustive(const std::vector<float>& w, const std::vector<float>& a) {
  const int n = int(w.size());
  int total = 1;
  for (int i = 0; i < n; ++i) total *= 3;
  std::vector<int8_t> c(static_cast<size_t>(n));
  double energy = 0.0;
  for (int j = 0; j < n; ++j) energy += double(a[j]) * double(w[j]) * double(w[j]);
  Best best;
  best.real = best.stored = energy;  // all codes zero
  for (int v = 0; v < total; ++v) {
    int x = v;
    double num = 0.0, den = 0.0;
    for (int j = 0; j < n; ++j, x /= 3) {
      c[size_t(j)] = int8_t(x % 3 - 1);
      num += double(a[j]) * double(w[j]) * c[size_t(j)];
      den += double(a[j]) * c[size_t(j)] * c[size_t(j)];
    }
    if (den <= 0.0 || num <= 0.0) continue;
    best.real = std::min(best.real, energy - num * num / den);
    const int h0 = f32_to_fp16(float(num / den));
    for (int h = std::max(h0 - 2, 1); h <= h0 + 2; ++h)
      best.stored = std::min(best.stored, weighted_error(w.data(), a.data(), n, c.data(), fp16_to_f32(uint16_t(h))));
  }
  return best;
}

TEST(GroupFit, OptimalEqualsExhaustiveSearchOnSmallGroups) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 6 + trial % 5;  // 6..10 weights: 3^10 code vectors at most
    auto w = test::random_weights(1, n, trial % 2 ? Dist::heavy : Dist::normal, 100 + trial);
    auto a = test::random_importance(n, 200 + trial);
    if (trial % 3 == 0) a[size_t(trial % n)] = 0.0f;  // an input never seen
    // Tiny weights: the scale is an fp16 subnormal a few steps of 2^-24 wide, where the rounding
    // of the scale costs the most.
    if (trial % 2 == 1)
      for (float& v : w) v *= 1.5e-5f;
    const Best b = exhaustive(w, a);

    double real_err = 0.0;
    optimal_real_scale(w.data(), a.data(), n, &real_err);
    EXPECT_NEAR(real_err, b.real, 1e-9 * b.real + 1e-18) << "trial " << trial;

    std::vector<int8_t> c(static_cast<size_t>(n));
    const uint16_t d = fit_optimal(w.data(), a.data(), n, c.data());
    const double err = weighted_error(w.data(), a.data(), n, c.data(), fp16_to_f32(d));
    EXPECT_NEAR(err, b.stored, 1e-9 * b.stored + 1e-18) << "trial " << trial;
    EXPECT_GE(err, real_err * (1 - 1e-12));  // rounding the scale cannot beat the real optimum
  }
}

// No single code flip, and no nearby fp16 scale (with the codes re-chosen for it), improves the
// weighted error of a 128-group fitted by `optimal`; its codes are the best for its stored scale.
TEST(GroupFit, OptimalIsALocalOptimumForItsStoredScale) {
  const int64_t n = 128;
  for (int trial = 0; trial < 40; ++trial) {
    const auto w = test::random_weights(1, n, trial % 2 ? Dist::heavy : Dist::normal, 300 + trial);
    const auto a = test::random_importance(n, 400 + trial);
    std::vector<int8_t> c(n), alt(n);
    const uint16_t d = fit_optimal(w.data(), a.data(), n, c.data());
    ASSERT_NE(d, 0);
    const float df = fp16_to_f32(d);
    const double err = weighted_error(w.data(), a.data(), n, c.data(), df);
    codes_for_scale(w.data(), n, df, alt.data());
    EXPECT_EQ(alt, c) << "codes are not the best for the stored scale";
    for (int64_t j = 0; j < n; ++j)
      for (int8_t v = -1; v <= 1; ++v) {
        alt = c;
        alt[size_t(j)] = v;
        EXPECT_GE(weighted_error(w.data(), a.data(), n, alt.data(), df), err * (1 - 1e-12));
      }
    for (int step = -8; step <= 8; ++step) {
      const float d2 = fp16_to_f32(uint16_t(d + step));
      codes_for_scale(w.data(), n, d2, alt.data());
      EXPECT_GE(weighted_error(w.data(), a.data(), n, alt.data(), d2), err * (1 - 1e-12)) << "step " << step;
    }
  }
}

TEST(GroupFit, OptimalIsNoWorseThanRtnAndAbsmeanOnEveryGroup) {
  const int64_t n = 128, groups = 400;
  double sum_opt = 0, sum_rtn = 0, sum_abs = 0;
  for (int dist = 0; dist < 2; ++dist) {
    const auto w = test::random_weights(groups, n, dist ? Dist::heavy : Dist::normal, 11 + dist);
    for (int64_t g = 0; g < groups; ++g) {
      // Half the groups weighted by a random importance, half unweighted.
      const auto imp = test::random_importance(n, uint32_t(1000 + g));
      const float* a = g % 2 ? imp.data() : nullptr;
      const float* wg = w.data() + g * n;
      std::vector<int8_t> c(n);
      const double e_opt = weighted_error(wg, a, n, c.data(), fp16_to_f32(fit_optimal(wg, a, n, c.data())));
      const double e_rtn = weighted_error(wg, a, n, c.data(), fp16_to_f32(fit_rtn(wg, n, c.data())));
      const double e_abs = weighted_error(wg, a, n, c.data(), fp16_to_f32(fit_absmean(wg, n, c.data())));
      EXPECT_LE(e_opt, e_rtn * (1 + 1e-12)) << "group " << g;
      EXPECT_LE(e_opt, e_abs * (1 + 1e-12)) << "group " << g;
      sum_opt += e_opt;
      sum_rtn += e_rtn;
      sum_abs += e_abs;
    }
  }
  // Margins, not just ties: max-scaled rtn zeroes most weights; TWN's fixed threshold is close
  // to optimal for Gaussian rows but not for heavy tails and weighted columns.
  EXPECT_LT(sum_opt, 0.6 * sum_rtn);
  EXPECT_LT(sum_opt, 0.97 * sum_abs);
}

TEST(GroupFit, AbsmeanIsTwn) {
  // |w| = 1..8 (mean 4.5, Δ = 3.15): kept 4..8, scale mean(4..8) = 6.
  std::vector<float> w = {1, -2, 3, -4, 5, -6, 7, -8};
  std::vector<int8_t> c(8);
  const uint16_t d = fit_absmean(w.data(), 8, c.data());
  EXPECT_EQ(fp16_to_f32(d), 6.0f);
  EXPECT_EQ(c, (std::vector<int8_t>{0, 0, 0, -1, 1, -1, 1, -1}));
}

TEST(GroupFit, ZeroGroupsStoreZeroScale) {
  std::vector<float> w(128, 0.0f);
  std::vector<float> a(128, 1.0f);
  std::vector<int8_t> c(128, 5);
  EXPECT_EQ(fit_rtn(w.data(), 128, c.data()), 0);
  EXPECT_EQ(fit_absmean(w.data(), 128, c.data()), 0);
  EXPECT_EQ(fit_optimal(w.data(), a.data(), 128, c.data()), 0);
  for (const int8_t v : c) EXPECT_EQ(v, 0);
  // Weights too small for any fp16 scale (below half the least subnormal) quantize to zero.
  std::fill(w.begin(), w.end(), 1e-9f);
  EXPECT_EQ(fit_optimal(w.data(), a.data(), 128, c.data()), 0);
  EXPECT_EQ(fit_absmean(w.data(), 128, c.data()), 0);
  for (const int8_t v : c) EXPECT_EQ(v, 0);
}

TEST(GroupFit, AllZeroImportanceFallsBackToPlainError) {
  const auto w = test::random_weights(1, 128, Dist::normal, 5);
  std::vector<float> zero(128, 0.0f);
  std::vector<int8_t> c0(128), c1(128);
  EXPECT_EQ(fit_optimal(w.data(), zero.data(), 128, c0.data()), fit_optimal(w.data(), nullptr, 128, c1.data()));
  EXPECT_EQ(c0, c1);
}

TEST(GroupFit, TiesGoToZero) {
  const float w[3] = {0.5f, -0.5f, 1.0f};
  int8_t c[3];
  codes_for_scale(w, 3, 1.0f, c);
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], 0);
  EXPECT_EQ(c[2], 1);
}

}  // namespace
}  // namespace bonsai::quant
