// Method tune (quantize/tune.h): never worse than its start (optimal), better where the inputs are
// correlated, codes chosen against the stored fp16 scales, the same result for any thread count.
// Every test that runs the method skips in a build without LibTorch.
#include "quantize/tune.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/ternary.h"
#include "synthetic.h"

namespace bonsai::quant {
namespace {

#define BONSAI_REQUIRE_TORCH()        \
  try {                               \
    require_torch();                  \
  } catch (const Error& e) {          \
    GTEST_SKIP() << e.what();         \
  }

struct Layer {
  int64_t rows, cols;
  std::vector<float> w, imp;
  std::vector<double> g;
  MatrixIn in() const { return MatrixIn{w.data(), rows, cols, imp.data(), g.data()}; }
};

// Correlated inputs: the case optimal (which sees only the Gram diagonal) leaves room in.
Layer correlated_layer(int64_t rows, int64_t cols, uint32_t seed) {
  Layer l{rows, cols, test::random_weights(rows, cols, test::Dist::heavy, seed), {}, {}};
  const int64_t n = 2 * cols;
  l.g = test::gram_of(test::correlated_inputs(n, cols, 3.0, seed + 1), n, cols);
  l.imp = test::diagonal(l.g, cols);
  return l;
}

double error_of(const Layer& l, const TernaryMatrix& q) { return relative_output_error(l.in(), q.dequantize()); }

TEST(Tune, BeatsItsStartOnCorrelatedInputs) {
  BONSAI_REQUIRE_TORCH();
  const Layer l = correlated_layer(40, 256, 11);  // 40 rows: a full chunk and a partial one
  const double optimal = error_of(l, quantize_ternary(l.in(), Method::optimal));
  const double tune = error_of(l, quantize_ternary(l.in(), Method::tune));
  RecordProperty("optimal", std::to_string(optimal));
  RecordProperty("tune", std::to_string(tune));
  EXPECT_LT(tune, 0.95 * optimal) << "optimal " << optimal << ", tune " << tune;
}

// With G diagonal and the importance its diagonal, optimal is the exact minimiser of the output
// error over fp16 scales and codes: tune cannot improve on it, and must give it back unchanged.
TEST(Tune, KeepsAnExactOptimumUnchanged) {
  BONSAI_REQUIRE_TORCH();
  const int64_t rows = 8, cols = 256;
  Layer l{rows, cols, test::random_weights(rows, cols, test::Dist::heavy, 5), test::random_importance(cols, 6), {}};
  l.g.assign(size_t(cols * cols), 0.0);
  for (int64_t j = 0; j < cols; ++j) l.g[size_t(j * cols + j)] = l.imp[size_t(j)];
  const TernaryMatrix opt = quantize_ternary(l.in(), Method::optimal), tune = quantize_ternary(l.in(), Method::tune);
  EXPECT_EQ(tune.codes, opt.codes);
  EXPECT_EQ(tune.scales, opt.scales);
}

// The stored result is what the loss measured: codes in {-1, 0, +1} with the sign of their weight,
// kept by one threshold on |w| per group (against the stored scale: every kept weight above every
// dropped one), d = 0 exactly when a group keeps none, and the packed bytes decode to dequantize.
TEST(Tune, CodesFollowOneThresholdPerGroupOnTheStoredScale) {
  BONSAI_REQUIRE_TORCH();
  const Layer l = correlated_layer(16, 384, 21);
  const TernaryMatrix q = quantize_ternary(l.in(), Method::tune);
  const int64_t groups = l.cols / kGroup;
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      float kept_min = INFINITY, dropped_max = 0.0f;
      for (int64_t j = 0; j < kGroup; ++j) {
        const size_t i = size_t(r * l.cols + g * kGroup + j);
        const int8_t c = q.codes[i];
        ASSERT_TRUE(c >= -1 && c <= 1);
        if (c != 0) {
          EXPECT_EQ(c > 0, l.w[i] > 0.0f) << "row " << r << " col " << g * kGroup + j;
          kept_min = std::min(kept_min, std::fabs(l.w[i]));
        } else {
          dropped_max = std::max(dropped_max, std::fabs(l.w[i]));
        }
      }
      const uint16_t d = q.scales[size_t(r * groups + g)];
      EXPECT_EQ(d == 0, kept_min == INFINITY) << "row " << r << " group " << g;
      EXPECT_GT(kept_min, dropped_max) << "row " << r << " group " << g;
      EXPECT_TRUE(std::isfinite(fp16_to_f32(d)) && fp16_to_f32(d) >= 0.0f);
    }
  const auto y = q.dequantize();
  std::vector<float> decoded(y.size());
  const auto bytes = q.pack(TypeId::PTQ1_0);
  traits(TypeId::PTQ1_0).to_float(bytes.data(), decoded.data(), int64_t(decoded.size()));
  EXPECT_EQ(decoded, y);
}

TEST(Tune, SameResultForAnyThreadCount) {
  BONSAI_REQUIRE_TORCH();
  const Layer l = correlated_layer(72, 256, 31);  // two chunks, the second one short
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const TernaryMatrix one = quantize_ternary(l.in(), Method::tune);
  omp_set_num_threads(2);
  const TernaryMatrix two = quantize_ternary(l.in(), Method::tune);
  const TernaryMatrix again = quantize_ternary(l.in(), Method::tune);
  omp_set_num_threads(before);
  EXPECT_EQ(one.codes, two.codes);
  EXPECT_EQ(one.scales, two.scales);
  EXPECT_EQ(two.codes, again.codes);
  EXPECT_EQ(two.scales, again.scales);
}

TEST(Tune, FourLevelsRefineTheTunedResult) {
  BONSAI_REQUIRE_TORCH();
  const Layer l = correlated_layer(8, 256, 41);
  MethodOptions four;
  four.four_levels = true;
  const TernaryMatrix q3 = quantize_ternary(l.in(), Method::tune), q4 = quantize_ternary(l.in(), Method::tune, four);
  for (const int8_t c : q4.codes) ASSERT_TRUE(c >= -1 && c <= 2);
  EXPECT_NE(q4.codes, q3.codes);  // heavy tails: some weights take the +2 level
  EXPECT_NO_THROW(q4.pack(TypeId::PQ2_0));
}

void expect_error(const MatrixIn& in, const std::string& part, const MethodOptions& o = {}) {
  try {
    quantize_ternary(in, Method::tune, o);
    FAIL() << "no error, expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Tune, BadInputIsAnError) {
  BONSAI_REQUIRE_TORCH();
  std::vector<float> w(4 * 256, 0.01f);
  expect_error(MatrixIn{w.data(), 4, 256}, "method tune needs the Gram matrix");
  std::vector<double> g(256 * 256, 0.0);
  for (int j = 0; j < 256; ++j) g[size_t(j * 256 + j)] = 1.0;
  const MatrixIn in{w.data(), 4, 256, nullptr, g.data()};
  MethodOptions o;
  o.tune_steps = -1;
  expect_error(in, "tune steps -1", o);
  o = {};
  o.tune_lr = 0.0;
  expect_error(in, "learning rate", o);
  g[7] = NAN;
  expect_error(in, "entry 0,7");
}

TEST(Tune, WithoutLibTorchTheMethodSaysHowToGetIt) {
  try {
    require_torch();
  } catch (const Error&) {
    std::vector<float> w(256, 0.01f);
    expect_error(MatrixIn{w.data(), 1, 256}, "install libtorch-dev and rebuild");
    return;
  }
  GTEST_SKIP() << "this build has LibTorch";
}

}  // namespace
}  // namespace bonsai::quant
