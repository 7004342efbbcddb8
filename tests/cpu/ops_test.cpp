// Element-wise forward-pass steps against their formulas evaluated in long double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "runtime/cpu/ops.h"

using namespace bonsai;

TEST(CpuOps, RmsnormMatchesFormula) {
  // [3, 4]: mean of squares 12.5.
  float x[2] = {3, 4}, y[2];
  cpu::rmsnorm(x, nullptr, 2, 0.0f, y);
  EXPECT_FLOAT_EQ(y[0], float(3 / std::sqrt(12.5L)));
  EXPECT_FLOAT_EQ(y[1], float(4 / std::sqrt(12.5L)));

  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> v(2048), w(2048), out(2048);
  for (auto& e : v) e = nd(rng);
  for (auto& e : w) e = nd(rng);
  long double ss = 0;
  for (float e : v) ss += (long double)e * e;
  const long double inv = 1 / std::sqrt(ss / 2048 + 1e-6L);
  cpu::rmsnorm(v.data(), w.data(), 2048, 1e-6f, out.data());
  for (int i = 0; i < 2048; ++i) ASSERT_NEAR(out[i], double(v[i] * inv * w[i]), 1e-6 * std::fabs(double(v[i] * inv * w[i])) + 1e-7);
  cpu::rmsnorm(v.data(), w.data(), 2048, 1e-6f, v.data());  // in place
  EXPECT_EQ(v, out);
}

TEST(CpuOps, SoftmaxIsStableAndMasks) {
  float x[4] = {1000.0f, 1001.0f, -std::numeric_limits<float>::infinity(), 999.0f};
  cpu::softmax(x, 4);
  const long double e0 = std::exp(-1.0L), e3 = std::exp(-2.0L), s = e0 + 1 + e3;
  EXPECT_FLOAT_EQ(x[0], float(e0 / s));
  EXPECT_FLOAT_EQ(x[1], float(1 / s));
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_FLOAT_EQ(x[3], float(e3 / s));
}

TEST(CpuOps, SwigluMatchesFormula) {
  const float gate[5] = {-100.0f, -1.5f, 0.0f, 0.7f, 30.0f}, up[5] = {2.0f, -3.0f, 5.0f, 1.25f, -0.5f};
  float out[5];
  cpu::swiglu(gate, up, 5, out);
  for (int i = 0; i < 5; ++i) {
    const long double g = gate[i], want = g / (1 + std::exp(-g)) * up[i];
    EXPECT_NEAR(out[i], double(want), 1e-6 * std::fabs(double(want)) + 1e-30) << i;
  }
  EXPECT_FALSE(std::isnan(out[0]));
}

// Lengths below, at and past the widest vector (16 floats), so that the clone of simd.h's loops
// this CPU runs meets full vectors and remainders; libmvec's exp is within a few ulp, checked
// here at 1e-6 relative (8 ulp).
TEST(CpuOps, LongRowsMatchFormulaInEveryLane) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int n : {1, 7, 16, 33, 1000, 6144}) {
    const auto len = static_cast<size_t>(n);
    std::vector<float> g(len), u(len), out(len), s(len);
    for (int i = 0; i < n; ++i) {
      g[size_t(i)] = nd(rng);
      u[size_t(i)] = nd(rng);
    }
    cpu::swiglu(g.data(), u.data(), n, out.data());
    for (int i = 0; i < n; ++i) {
      const long double x = g[size_t(i)], want = x / (1 + std::exp(-x)) * u[size_t(i)];
      ASSERT_NEAR(out[size_t(i)], double(want), 1e-6 * std::fabs(double(want)) + 1e-30) << "n " << n << " at " << i;
    }
    s = g;
    cpu::softmax(s.data(), n);
    const long double mx = *std::max_element(g.begin(), g.end());
    long double sum = 0;
    for (float x : g) sum += std::exp(x - mx);
    for (int i = 0; i < n; ++i) {
      // x - max is rounded to float first: that alone moves exp by |x - max| × 2^-24 relative.
      const long double arg = g[size_t(i)] - mx, want = std::exp(arg) / sum;
      const double tol = (1e-6 + 6e-8 * std::fabs(double(arg))) * double(want) + 1e-30;
      ASSERT_NEAR(s[size_t(i)], double(want), tol) << "n " << n << " at " << i;
    }
    long double ss = 0;
    for (float x : g) ss += (long double)x * x;
    const long double inv = 1 / std::sqrt(ss / n + 1e-6L);
    cpu::rmsnorm(g.data(), u.data(), n, 1e-6f, out.data());
    for (int i = 0; i < n; ++i) {
      const long double want = g[size_t(i)] * inv * u[size_t(i)];
      ASSERT_NEAR(out[size_t(i)], double(want), 1e-6 * std::fabs(double(want)) + 1e-7) << "n " << n << " at " << i;
    }
  }
}
