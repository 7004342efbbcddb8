// The residual fitted with the base in the output metric (quantize/residual_joint.h): it beats the
// grid alone and the residual fitted afterwards to W − Ŵ, its stated error is what the stored
// tensors decode to, more centroids help, and the thread count changes no bit.
#include "quantize/residual_joint.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "formats/error.h"
#include "quantize/grid4.h"
#include "synthetic.h"

namespace bonsai::quant {
namespace {

struct Layer {
  int64_t rows = 64, cols = 256, n = 600;
  std::vector<float> w, imp;
  std::vector<double> g;
  TernaryMatrix grid;  // the four-level GPTQ result stage 2 starts from
  Layer() {
    w = test::random_weights(rows, cols, test::Dist::heavy, 51);
    g = test::gram_of(test::correlated_inputs(n, cols, 3.0, 52), n, cols);
    imp = test::diagonal(g, cols);
    MethodOptions four;
    four.four_levels = true;
    grid = quantize_ternary(in(), Method::gptq, four);
  }
  MatrixIn in() const { return MatrixIn{w.data(), rows, cols, imp.data(), g.data()}; }
  double error_with(const TernaryMatrix& base, const ResidualFit& f) const {
    std::vector<float> y = base.dequantize();
    const std::vector<float> r = residual_values(f, rows, cols);
    for (size_t i = 0; i < y.size(); ++i) y[i] += r[i];
    return relative_output_error(in(), y);
  }
};

ResidualOptions kmeans(int64_t dim, int64_t size, int64_t rows = 0) {
  ResidualOptions o;
  o.kind = ResidualKind::kmeans;
  o.dim = dim;
  o.size = size;
  o.rows = rows;
  return o;
}

TEST(ResidualJoint, BeatsTheGridAndTheResidualFittedAfterwards) {
  const Layer l;
  const double grid = relative_output_error(l.in(), l.grid.dequantize());
  const ResidualOptions o = kmeans(8, 16);
  const JointFit jf = fit_joint_residual(l.in(), MethodOptions{}, o, l.grid);
  // The stated error is the stored tensors' (fp16 centroids, packed indices, canonical blocks).
  EXPECT_NEAR(l.error_with(jf.base, jf.residual), jf.error, 1e-9 + 1e-6 * jf.error);
  const double after = l.error_with(l.grid, fit_residual(l.in(), l.grid.dequantize(), o));
  RecordProperty("grid", std::to_string(grid));
  RecordProperty("afterwards", std::to_string(after));
  RecordProperty("joint", std::to_string(jf.error));
  EXPECT_LT(jf.error, 0.85 * grid);
  EXPECT_LT(jf.error, after);
  // The base is still a four-level matrix in canonical form: it packs to PQ2_0 and every group
  // re-encodes to itself.
  const std::vector<float> y = jf.base.dequantize();
  for (int64_t b = 0; b < l.rows * l.cols / kGroup; ++b) {
    std::vector<int8_t> codes(static_cast<size_t>(kGroup));
    EXPECT_EQ(reencode_grid4(y.data() + b * kGroup, kGroup, codes.data()), jf.base.scales[size_t(b)]) << b;
  }
  EXPECT_EQ(jf.residual.bytes(), uint64_t(16 * 8 * 2 + l.rows * (l.cols / 8) * 4 / 8));
}

TEST(ResidualJoint, MoreCentroidsAndShorterVectorsLowerTheError) {
  const Layer l;
  const double k4 = fit_joint_residual(l.in(), MethodOptions{}, kmeans(8, 4), l.grid).error;
  const double k64 = fit_joint_residual(l.in(), MethodOptions{}, kmeans(8, 64), l.grid).error;
  const double v4 = fit_joint_residual(l.in(), MethodOptions{}, kmeans(4, 64), l.grid).error;
  EXPECT_LT(k64, k4);
  EXPECT_LT(v4, k64);
}

TEST(ResidualJoint, RowGroupsAndThreadCountsGiveTheSameBitsEveryTime) {
  const Layer l;
  const ResidualOptions o = kmeans(8, 16, 16);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const JointFit one = fit_joint_residual(l.in(), MethodOptions{}, o, l.grid);
  omp_set_num_threads(std::max(2, threads));
  const JointFit many = fit_joint_residual(l.in(), MethodOptions{}, o, l.grid);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.residual.books, 4);
  EXPECT_EQ(one.residual.codebook, many.residual.codebook);
  EXPECT_EQ(one.residual.index, many.residual.index);
  EXPECT_EQ(one.base.codes, many.base.codes);
  EXPECT_EQ(one.base.scales, many.base.scales);
}

TEST(ResidualJoint, NamedErrors) {
  const Layer l;
  try {
    fit_joint_residual(l.in(), MethodOptions{}, kmeans(8, 16, 7), l.grid);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--rc-rows 7 does not divide the 64 rows"), std::string::npos) << e.what();
  }
  MatrixIn no_gram = l.in();
  no_gram.gram = nullptr;
  EXPECT_THROW(fit_joint_residual(no_gram, MethodOptions{}, kmeans(8, 16), l.grid), Error);
}

}  // namespace
}  // namespace bonsai::quant
