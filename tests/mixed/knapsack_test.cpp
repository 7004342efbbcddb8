// The budgeted type choice: the dynamic programme finds the optimum that brute force finds on
// small instances, never exceeds the budget (also when sizes must be coarsened), and refuses a
// budget no choice fits.
#include <gtest/gtest.h>

#include <random>

#include "mixed/knapsack.h"
#include "support.h"

using bonsai::mixed::choose_options;
using bonsai::mixed::Option;

namespace {

// Least loss over every combination within the budget; +inf when none fits.
double brute_force(const std::vector<std::vector<Option>>& items, uint64_t budget) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<size_t> k(items.size(), 0);
  while (true) {
    uint64_t b = 0;
    double l = 0;
    for (size_t i = 0; i < items.size(); ++i) b += items[i][k[i]].bytes, l += items[i][k[i]].loss;
    if (b <= budget) best = std::min(best, l);
    size_t i = 0;
    while (i < items.size() && ++k[i] == items[i].size()) k[i++] = 0;
    if (i == items.size()) return best;
  }
}

std::vector<std::vector<Option>> random_items(std::mt19937_64& rng, int n, bool block_sizes) {
  std::vector<std::vector<Option>> items(static_cast<size_t>(n));
  for (auto& it : items) {
    const int k = 1 + int(rng() % 4);
    const uint64_t elems = 128 * (1 + rng() % 8);
    for (int j = 0; j < k; ++j) {
      // Block types: bytes grow with bits/weight and loss falls (as sensitivities do); otherwise
      // arbitrary sizes and losses, where greedy rules fail.
      const uint64_t bytes = block_sizes ? elems * uint64_t(2 + 2 * j) / 8 : 1 + rng() % 97;
      const double loss = block_sizes ? std::ldexp(1.0, -3 * j) * double(1 + rng() % 100) : double(rng() % 1000) / 7;
      it.push_back({bytes, loss});
    }
  }
  return items;
}

}  // namespace

TEST(Knapsack, MatchesBruteForceAndRespectsTheBudget) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto items = random_items(rng, 1 + int(rng() % 7), trial % 2);
    uint64_t lo = 0, hi = 0;
    for (const auto& it : items) {
      uint64_t a = UINT64_MAX, b = 0;
      for (const auto& o : it) a = std::min(a, o.bytes), b = std::max(b, o.bytes);
      lo += a, hi += b;
    }
    const uint64_t budget = lo + rng() % (hi - lo + 1);
    const auto r = choose_options(items, budget);
    ASSERT_EQ(r.pick.size(), items.size());
    uint64_t bytes = 0;
    double loss = 0;
    for (size_t i = 0; i < items.size(); ++i) bytes += items[i][size_t(r.pick[i])].bytes, loss += items[i][size_t(r.pick[i])].loss;
    EXPECT_EQ(bytes, r.bytes);
    EXPECT_NEAR(loss, r.loss, 1e-9);
    EXPECT_LE(r.bytes, budget) << "trial " << trial;
    EXPECT_TRUE(r.exact);
    EXPECT_NEAR(r.loss, brute_force(items, budget), 1e-9) << "trial " << trial;
    ++checked;
  }
  EXPECT_EQ(checked, 300);
}

TEST(Knapsack, UsesTheSizesCommonDivisor) {
  // Tensor sizes of PTQ1_0 / PQ2_0 / Q4_0 / Q8_0 at 256 x 768 share 3072 bytes.
  std::vector<std::vector<Option>> items(3, {{43008, 1.0}, {52224, 0.5}, {110592, 0.1}, {208896, 0.01}});
  const auto r = choose_options(items, 3 * 52224 + 100);
  EXPECT_EQ(r.unit, 3072u);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.bytes, 3u * 52224);
  EXPECT_NEAR(r.loss, 1.5, 1e-12);
}

TEST(Knapsack, CoarsenedSizesStayWithinTheBudget) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    auto items = random_items(rng, 6, false);
    uint64_t lo = 0, hi = 0;
    for (const auto& it : items) {
      uint64_t a = UINT64_MAX, b = 0;
      for (const auto& o : it) a = std::min(a, o.bytes), b = std::max(b, o.bytes);
      lo += a, hi += b;
    }
    const uint64_t budget = hi;  // everything at its largest fits, whatever the rounding
    const auto r = choose_options(items, budget, 6 * 20);
    EXPECT_FALSE(r.exact);
    EXPECT_GT(r.unit, 1u);
    EXPECT_LE(r.bytes, budget);
    EXPECT_GE(r.loss, brute_force(items, budget) - 1e-9);  // never better than the true optimum
  }
}

TEST(Knapsack, RefusesABudgetNothingFits) {
  std::vector<std::vector<Option>> items = {{{100, 1}, {50, 2}}, {{70, 1}, {40, 3}}};
  EXPECT_NE(bonsai::test::error_of([&] { choose_options(items, 89); }).find("90 bytes"), std::string::npos);
  const auto r = choose_options(items, 90);
  EXPECT_EQ(r.bytes, 90u);
  EXPECT_EQ(r.pick, (std::vector<int>{1, 1}));
  EXPECT_NE(bonsai::test::error_of([&] { choose_options({{}}, 10); }).find("no option"), std::string::npos);
}
