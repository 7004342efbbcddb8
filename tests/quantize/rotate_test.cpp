// Rotation: signs are deterministic per (seed, width), folding W·S·H leaves every product with the
// runtime's rotated input unchanged, and bad block sizes are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "formats/error.h"
#include "quantize/rotate.h"

using namespace bonsai;
using namespace bonsai::quant;

TEST(Rotate, SignsAreDeterministicBalancedAndPerWidth) {
  const auto a = rotation_signs(7, 4096);
  EXPECT_EQ(a, rotation_signs(7, 4096));
  int neg = 0;
  for (float s : a) {
    ASSERT_TRUE(s == 1.0f || s == -1.0f);
    neg += s < 0;
  }
  EXPECT_GT(neg, 4096 / 2 - 200);
  EXPECT_LT(neg, 4096 / 2 + 200);
  EXPECT_NE(a, rotation_signs(8, 4096));
  const auto b = rotation_signs(7, 2048);
  EXPECT_FALSE(std::equal(b.begin(), b.end(), a.begin()));  // each width its own stream
  // splitmix64's first output from state 0 is 0xE220A8397B1DCDAF (top bit set): sign -1.
  const uint64_t gamma = 0x9E3779B97F4A7C15ull;
  EXPECT_EQ(rotation_signs(1 * gamma, 1)[0], -1.0f);  // seed ^ width·γ = 0
}

TEST(Rotate, FoldingKeepsEveryProduct) {
  const int64_t rows = 5, k1 = 256, k2 = 768, block = 128;
  const HadamardSpec spec = make_rotation({{"a", k1}, {"b", k2}, {"c", k1}}, block, 42);
  EXPECT_EQ(spec.block, block);
  EXPECT_EQ(spec.signs.size(), 2u);
  EXPECT_TRUE(spec.rotates("c"));
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  for (int64_t k : {k1, k2}) {
    std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(k));
    for (auto& v : w) v = d(rng);
    for (auto& v : x) v = d(rng);
    std::vector<double> y(size_t(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < k; ++i) y[size_t(r)] += double(w[size_t(r * k + i)]) * x[size_t(i)];
    std::vector<float> wr = w, xr = x;
    fold_rotation(spec, wr.data(), rows, k);
    hadamard_forward(spec, xr.data(), 1, k);  // what the runtime feeds a rotated weight
    double changed = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double yr = 0;
      for (int64_t i = 0; i < k; ++i) yr += double(wr[size_t(r * k + i)]) * xr[size_t(i)];
      EXPECT_NEAR(yr, y[size_t(r)], 1e-4 * std::sqrt(double(k))) << k << " row " << r;
    }
    for (size_t i = 0; i < w.size(); ++i) changed += std::fabs(w[i] - wr[i]);
    EXPECT_GT(changed, 1.0);  // the weights did change
  }
}

TEST(Rotate, RefusesBadBlocks) {
  auto msg = [](int64_t block) {
    try {
      make_rotation({{"blk.0.ffn_down.weight", 172}}, block, 0);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg(96).find("power of two"), std::string::npos);
  EXPECT_NE(msg(1).find("power of two"), std::string::npos);
  const std::string e = msg(64);
  EXPECT_NE(e.find("172"), std::string::npos) << e;
  EXPECT_NE(e.find("blk.0.ffn_down.weight"), std::string::npos) << e;
  EXPECT_NO_THROW(make_rotation({{"w", 172}}, 4, 0));
}
