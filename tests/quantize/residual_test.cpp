// Residual codebook fitting: the residual lowers the error, more centroids lower it more, the
// stored bytes are counted, options and shapes are checked.
#include "quantize/residual.h"

#include <gtest/gtest.h>

#include "formats/error.h"
#include "quantize/grid4.h"
#include "synthetic.h"

namespace bonsai::quant {
namespace {

using test::Dist;

struct Fitted {
  int64_t rows = 64, cols = 256;
  std::vector<float> w, a, w_hat;
  MatrixIn in;
  Fitted() {
    w = test::random_weights(rows, cols, Dist::heavy, 41);
    a = test::random_importance(cols, 42);
    in = MatrixIn{w.data(), rows, cols, a.data()};
    MethodOptions four;
    four.four_levels = true;
    w_hat = quantize_ternary(in, Method::optimal, four).dequantize();
  }
  double error_with(const ResidualFit& f) const {
    auto y = w_hat;
    const auto r = residual_values(f, rows, cols);
    for (size_t i = 0; i < y.size(); ++i) y[i] += r[i];
    return relative_output_error(in, y);
  }
};

TEST(Residual, KmeansLowersTheErrorAndMoreCentroidsLowerItMore) {
  const Fitted s;
  const double base = relative_output_error(s.in, s.w_hat);
  double prev = base;
  for (const int64_t k : {4, 16, 256}) {
    ResidualOptions o;
    o.kind = ResidualKind::kmeans;
    o.dim = 4;
    o.size = k;
    const ResidualFit f = fit_residual(s.in, s.w_hat, o);
    const double e = s.error_with(f);
    EXPECT_LT(e, prev) << "K " << k;
    prev = e;
    // Stored bytes: K·v fp16 centroids + ceil(log2 K)-bit indices per sub-vector.
    EXPECT_EQ(f.bytes(), uint64_t(k * 4 * 2 + s.rows * (((s.cols / 4) * index_bits(k) + 7) / 8))) << k;
  }
  EXPECT_LT(prev, 0.8 * base);
}

TEST(Residual, RowGroupsGiveEachGroupItsCodebook) {
  const Fitted s;
  ResidualOptions o;
  o.kind = ResidualKind::kmeans;
  o.dim = 8;
  o.size = 16;
  o.rows = 16;
  const ResidualFit f = fit_residual(s.in, s.w_hat, o);
  EXPECT_EQ(f.books, 4);
  EXPECT_EQ(f.codebook.size(), size_t(4 * 16 * 8));
  o.rows = 0;
  EXPECT_LE(s.error_with(f), s.error_with(fit_residual(s.in, s.w_hat, o)));  // 4 codebooks fit no worse than 1
  o.rows = 24;  // does not divide 64
  try {
    fit_residual(s.in, s.w_hat, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--rc-rows 24 does not divide the 64 rows"), std::string::npos) << e.what();
  }
}

TEST(Residual, PatternLowersTheErrorAtAQuarterBitPerWeight) {
  const Fitted s;
  ResidualOptions o;
  o.kind = ResidualKind::pattern;
  const ResidualFit f = fit_residual(s.in, s.w_hat, o);
  EXPECT_LT(s.error_with(f), relative_output_error(s.in, s.w_hat));
  // 2-bit index + fp16 μ and σ per 128 weights, plus 4 × 128 fp16 patterns per tensor.
  EXPECT_EQ(f.bytes(), uint64_t(4 * 128 * 2 + s.rows * (s.cols / 128) * (4 + 0) + s.rows * 1));
}

TEST(Residual, OptionErrors) {
  ResidualOptions o;
  o.kind = ResidualKind::kmeans;
  o.dim = 6;
  EXPECT_THROW(validate_residual(o), Error);
  o.dim = 8;
  o.size = 1;
  EXPECT_THROW(validate_residual(o), Error);
  o.size = 16;
  EXPECT_NO_THROW(validate_residual(o));
  EXPECT_EQ(parse_residual("pattern"), ResidualKind::pattern);
  EXPECT_THROW(parse_residual("rvq"), Error);
}

}  // namespace
}  // namespace bonsai::quant
