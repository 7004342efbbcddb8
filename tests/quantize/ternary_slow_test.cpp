// Every method on a matrix the size of Qwen3-1.7B's ffn_down (2048 outputs × 6144 inputs): the
// ordering of their output errors at full size, and their run times (printed, for docs/results).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "quantize/ternary.h"
#include "synthetic.h"

namespace bonsai::quant {
namespace {

TEST(TernarySlow, AllMethodsOnAnFfnDownSizedMatrix) {
  const int64_t rows = 2048, cols = 6144;
  const auto w = test::random_weights(rows, cols, test::Dist::heavy, 71);
  const auto g = test::ar1_gram(cols, 0.9, 72);
  const auto imp = test::diagonal(g, cols);
  const MatrixIn in{w.data(), rows, cols, imp.data(), g.data()};
  double err[4];
  for (const Method m : {Method::rtn, Method::absmean, Method::optimal, Method::gptq}) {
    const auto t0 = std::chrono::steady_clock::now();
    const TernaryMatrix q = quantize_ternary(in, m);
    const auto t1 = std::chrono::steady_clock::now();
    err[int(m)] = relative_output_error(in, q.dequantize());
    const auto t2 = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(t1 - t0).count();
    std::printf("%-8s %dx%d: %.2f s, relative output error %.5f (error computed in %.2f s)\n", method_name(m),
                int(rows), int(cols), s, err[int(m)], std::chrono::duration<double>(t2 - t1).count());
    RecordProperty(std::string(method_name(m)) + "_seconds", std::to_string(s));
  }
  EXPECT_LT(err[int(Method::optimal)], 0.8 * err[int(Method::rtn)]);
  EXPECT_LT(err[int(Method::optimal)], err[int(Method::absmean)]);
  EXPECT_LT(err[int(Method::gptq)], 0.9 * err[int(Method::optimal)]);
}

}  // namespace
}  // namespace bonsai::quant
