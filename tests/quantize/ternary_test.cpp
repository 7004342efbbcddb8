// quantize_ternary at the matrix level: the reference encoder, the packed bytes, bad input.
#include "quantize/ternary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "formats/error.h"
#include "formats/fp16.h"
#include "synthetic.h"

namespace bonsai::quant {
namespace {

using test::Dist;

constexpr Method kAll[] = {Method::rtn, Method::absmean, Method::optimal, Method::gptq};

std::vector<uint8_t> reference_encode(TypeId type, const std::vector<float>& w) {
  const TypeTraits& t = traits(type);
  std::vector<uint8_t> out(w.size() / size_t(t.block_elems) * size_t(t.block_bytes));
  t.from_float(w.data(), out.data(), int64_t(w.size()));
  return out;
}

std::vector<float> reference_decode(TypeId type, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> y(n);
  traits(type).to_float(bytes.data(), y.data(), int64_t(n));
  return y;
}

// A matrix with the cases the reference rule is picky about: an all-zero group, a group whose
// values sit exactly at half its max (lroundf rounds those away from zero), a lone outlier.
std::vector<float> tricky_weights(int64_t rows, int64_t cols, uint32_t seed) {
  auto w = test::random_weights(rows, cols, seed % 2 ? Dist::heavy : Dist::normal, seed);
  for (int64_t j = 0; j < kGroup; ++j) w[size_t(j)] = 0.0f;
  for (int64_t j = 0; j < kGroup; ++j) w[size_t(kGroup + j)] = j % 3 == 0 ? 0.25f : (j % 3 == 1 ? -0.125f : 0.0625f);
  w[size_t(cols + 5)] = 3.0f;
  return w;
}

TEST(Ternary, RtnIsThePtq1ReferenceEncoder) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const int64_t rows = 9, cols = 384;
    const auto w = tricky_weights(rows, cols, seed);
    const MatrixIn in{w.data(), rows, cols};
    const TernaryMatrix q = quantize_ternary(in, Method::rtn);
    // |w/max| <= 1, so PQ2_0's reference (codes clamped to [-1, 3]) takes the same codes.
    EXPECT_EQ(q.pack(TypeId::PTQ1_0), reference_encode(TypeId::PTQ1_0, w)) << "seed " << seed;
    EXPECT_EQ(q.pack(TypeId::PQ2_0), reference_encode(TypeId::PQ2_0, w)) << "seed " << seed;
  }
}

TEST(Ternary, PackedBytesDecodeToDequantize) {
  const int64_t rows = 12, cols = 256;
  const auto w = tricky_weights(rows, cols, 3);
  const auto a = test::random_importance(cols, 4);
  const auto x = test::correlated_inputs(512, cols, 1.0, 5);
  const auto g = test::gram_of(x, 512, cols);
  const MatrixIn in{w.data(), rows, cols, a.data(), g.data()};
  for (const Method m : kAll) {
    const TernaryMatrix q = quantize_ternary(in, m);
    ASSERT_EQ(q.codes.size(), size_t(rows * cols));
    ASSERT_EQ(q.scales.size(), size_t(rows * cols / kGroup));
    for (const int8_t c : q.codes) ASSERT_TRUE(c >= -1 && c <= 1);
    const auto y = q.dequantize();
    for (const TypeId t : {TypeId::PTQ1_0, TypeId::PQ2_0}) {
      const auto bytes = q.pack(t);
      EXPECT_EQ(bytes.size(), size_t(rows * cols / kGroup * traits(t).block_bytes));
      EXPECT_EQ(reference_decode(t, bytes, y.size()), y) << method_name(m) << " " << traits(t).name;
    }
  }
}

// A stored block re-encodes to itself with the reference rule when its scale is its max |ŵ|:
// every method stores d = 0 for a group without a nonzero code, so this holds for all of them.
TEST(Ternary, DecodedBlocksReencodeToTheSameBytes) {
  const int64_t rows = 16, cols = 512;
  const auto w = tricky_weights(rows, cols, 8);
  const auto x = test::correlated_inputs(600, cols, 1.0, 9);
  const auto g = test::gram_of(x, 600, cols);
  const auto a = test::diagonal(g, cols);
  const MatrixIn in{w.data(), rows, cols, a.data(), g.data()};
  for (const Method m : kAll) {
    const TernaryMatrix q = quantize_ternary(in, m);
    for (const TypeId t : {TypeId::PTQ1_0, TypeId::PQ2_0}) {
      const auto bytes = q.pack(t);
      EXPECT_EQ(reference_encode(t, reference_decode(t, bytes, w.size())), bytes)
          << method_name(m) << " " << traits(t).name;
    }
  }
}

TEST(Ternary, RelativeErrorWithoutGramIsWeightedSquaredError) {
  const std::vector<float> w(128, 2.0f), w_hat(128, 1.0f);
  std::vector<float> a(128, 0.0f);
  a[3] = 5.0f;
  EXPECT_DOUBLE_EQ(relative_output_error(MatrixIn{w.data(), 1, 128}, w_hat), 0.25);
  EXPECT_DOUBLE_EQ(relative_output_error(MatrixIn{w.data(), 1, 128, a.data()}, w_hat), 0.25);
  a[4] = 1.0f;
  std::vector<float> w2 = w;
  w2[4] = 1.0f;  // column 4 quantized exactly, column 3 off by 1
  EXPECT_DOUBLE_EQ(relative_output_error(MatrixIn{w2.data(), 1, 128, a.data()}, w_hat), 5.0 / (5 * 4 + 1));
}

TEST(Ternary, MethodNames) {
  for (const Method m : kAll) EXPECT_EQ(parse_method(method_name(m)), m);
  try {
    parse_method("gptq2");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gptq2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rtn, absmean, optimal, gptq"), std::string::npos) << e.what();
  }
}

void expect_error(const MatrixIn& in, Method m, const std::string& part, const MethodOptions& o = {}) {
  try {
    quantize_ternary(in, m, o);
    FAIL() << "no error, expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Ternary, BadInputIsAnError) {
  std::vector<float> w(4 * 256, 0.01f);
  expect_error(MatrixIn{w.data(), 4, 200}, Method::rtn, "not a multiple of the group size 128");
  expect_error(MatrixIn{w.data(), 0, 128}, Method::optimal, "has no weights");
  expect_error(MatrixIn{nullptr, 4, 256}, Method::optimal, "no weights");
  expect_error(MatrixIn{w.data(), 4, 256}, Method::gptq, "needs the Gram matrix");
  MethodOptions four;
  four.four_levels = true;
  expect_error(MatrixIn{w.data(), 4, 256}, Method::gptq, "needs the Gram matrix", four);  // stage 2 checks as stage 1

  w[300] = NAN;
  expect_error(MatrixIn{w.data(), 4, 256}, Method::rtn, "weight 1,44");
  w[300] = 1e6f;
  expect_error(MatrixIn{w.data(), 4, 256}, Method::optimal, "fp16 range");
  w[300] = 0.01f;

  std::vector<float> a(256, 1.0f);
  a[7] = -1.0f;
  expect_error(MatrixIn{w.data(), 4, 256, a.data()}, Method::optimal, "importance of column 7");

  // Not a Gram matrix of real inputs: unit diagonal, every pair at -0.5 (indefinite).
  std::vector<double> g(256 * 256, -0.5);
  for (int j = 0; j < 256; ++j) g[size_t(j * 256 + j)] = 1.0;
  expect_error(MatrixIn{w.data(), 4, 256, nullptr, g.data()}, Method::gptq, "not positive definite");
  g[5] = NAN;
  expect_error(MatrixIn{w.data(), 4, 256, nullptr, g.data()}, Method::gptq, "entry 0,5");
  MethodOptions damp;
  damp.gptq_damp = -1;
  expect_error(MatrixIn{w.data(), 4, 256, nullptr, g.data()}, Method::gptq, "damping", damp);

  TernaryMatrix bad{1, 128, std::vector<int8_t>(128, 0), {0}};
  EXPECT_THROW(bad.pack(TypeId::Q8_0), Error);
  bad.codes[3] = 2;
  EXPECT_THROW(bad.pack(TypeId::PTQ1_0), Error);
  bad.codes.resize(100);
  EXPECT_THROW(bad.dequantize(), Error);
  EXPECT_THROW(relative_output_error(MatrixIn{w.data(), 4, 256}, std::vector<float>(10)), Error);
}

}  // namespace
}  // namespace bonsai::quant
