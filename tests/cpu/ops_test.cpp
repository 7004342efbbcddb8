// Element-wise forward-pass steps against their formulas evaluated in long double.
#include <gtest/gtest.h>

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
