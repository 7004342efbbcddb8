// `quantize --device cuda` against the CPU path, the reference (issue 47's GPU must-show): on
// zh-tiny-qwen3 with the default plan (gptq), the GPU's calibration forward, statistics and gptq
// give a perplexity within 0.3% of the CPU's and a mean relative output error within 5% of it.
// Skipped without a CUDA device (cuda_support.h).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cuda_support.h"
#include "quantize/pipeline.h"
#include "runtime/load.h"
#include "runtime/perplexity.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::quant;

namespace {

const char* kModel = "models/zh-tiny-qwen3";
const char* kEval = "corpora/zh/eval-debian-handbook-zh-CN.txt";

double mean_error(const QuantizeResult& r) {
  double s = 0;
  for (const auto& e : r.errors) s += e.rel_error;
  return s / double(r.errors.size());
}

double ppl_of(const std::string& path) {
  const auto m = load_model(path);
  std::ifstream f(test::shared_file(kEval), std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  const auto tokens = model_tokenizer(*m)->encode(ss.str(), false, false);
  auto be = make_backend("cpu", 0);
  PerplexityOptions o;
  o.n_ctx = 512;
  o.max_chunks = 16;
  return perplexity(*m, *be, tokens, o, kEval).ppl;
}

}  // namespace

TEST(QuantizeCuda, MatchesTheCpuPathOnZhTiny) {
  BONSAI_REQUIRE_CUDA();
  BONSAI_REQUIRE_SHARED(kModel);
  BONSAI_REQUIRE_SHARED(kEval);
  const auto dir = test::scratch_dir();
  QuantizeOptions o;
  o.source = test::shared_file(kModel).string();
  o.calib_files = {test::shared_file("corpora/zh/calib-fortunes-zh.txt").string()};
  o.calib_windows = 32;
  o.output = (dir / "cpu.gguf").string();
  const QuantizeResult cpu = quantize_model(o);
  o.device = "cuda";
  o.output = (dir / "cuda.gguf").string();
  const QuantizeResult gpu = quantize_model(o);
  ASSERT_EQ(cpu.errors.size(), gpu.errors.size());
  EXPECT_GT(gpu.predicted_device_bytes, 0u);
  EXPECT_GT(gpu.peak_device_bytes, 0);
  EXPECT_LE(uint64_t(gpu.peak_device_bytes), gpu.predicted_device_bytes) << "the prediction is an upper bound";
  const double ec = mean_error(cpu), eg = mean_error(gpu);
  EXPECT_NEAR(eg / ec, 1.0, 0.05) << "mean relative output error: cpu " << ec << ", cuda " << eg;
  const double pc = ppl_of((dir / "cpu.gguf").string()), pg = ppl_of(o.output);
  EXPECT_NEAR(pg / pc, 1.0, 0.003) << "perplexity: cpu " << pc << ", cuda " << pg;
  std::printf("{\"test\": \"QuantizeCuda\", \"ppl_cpu\": %.4f, \"ppl_cuda\": %.4f, \"err_cpu\": %.6f, \"err_cuda\": %.6f, "
              "\"peak_device_bytes\": %lld, \"predicted_device_bytes\": %llu}\n",
              pc, pg, ec, eg, (long long)gpu.peak_device_bytes, (unsigned long long)gpu.predicted_device_bytes);
}
