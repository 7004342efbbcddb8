// quantize/memory_plan.h on the published Qwen3 shapes (runtime/synth.h's presets): what a job
// is predicted to need, that it does not grow with the number of blocks, that the calibration
// buffers spill largest first, and that a limit below the fixed part is a named error. Prints the
// table docs/scale.md quotes (bonsai_quantize_tests --gtest_filter='MemoryPlan.*').
#include <gtest/gtest.h>

#include <cstdio>

#include "formats/error.h"
#include "quantize/memory_plan.h"
#include "quantize/pipeline.h"
#include "runtime/synth.h"

using namespace bonsai;
using namespace bonsai::quant;

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The default plan resolved on a shape's tensors (BF16, as a Hugging Face checkpoint stores them).
ResolvedPlan default_plan(const ModelConfig& c, bool tied) {
  std::vector<Tensor> ts;
  for (const TensorSpec& s : architecture_tensors(c, tied)) {
    Tensor t;
    t.name = s.name;
    t.ne = s.ne;
    t.type = s.matrix ? TypeId::BF16 : TypeId::F32;
    ts.push_back(t);
  }
  return resolve_plan(load_plan(kDefaultPlan), ts, c.n_layer, std::nullopt, kDefaultMethod);
}

MemoryJob calibrated(int64_t windows) {
  MemoryJob job;
  job.calibrate = job.gram = true;
  job.windows = windows;
  job.len = 512;
  return job;
}

MemoryNeed need_of(const std::string& size, int64_t windows, int64_t layers = 0) {
  bool tied = false;
  ModelConfig c = synth_config("qwen3", size, &tied);
  if (layers > 0) c.n_layer = layers;
  return predict_memory(c, default_plan(c, tied), calibrated(windows));
}

// The GPU's need (--device cuda) of one block; 0 in a build without CUDA.
double device_gib(const std::string& size, int64_t windows) {
  bool tied = false;
  const ModelConfig c = synth_config("qwen3", size, &tied);
  uint64_t total = 0;
  for (const MemoryItem& i : predict_device_memory(c, default_plan(c, tied), calibrated(windows))) total += i.bytes;
  return double(total) / kGiB;
}

}  // namespace

TEST(MemoryPlan, PredictsTheQwen3Shapes) {
  std::printf("%-6s %8s %12s %22s %16s\n", "size", "windows", "fixed (GiB)", "window buffers (GiB)", "GPU (GiB)");
  for (const std::string& size : synth_sizes("qwen3")) {
    for (int64_t w : {8, 32, 128}) {
      const MemoryNeed n = need_of(size, w);
      std::printf("%-6s %8lld %12.2f %22.2f %16.2f  (%s)\n", size.c_str(), (long long)w, double(n.fixed_bytes()) / kGiB,
                  double(n.buffer_bytes()) / kGiB, device_gib(size, w), n.peak_matrix.c_str());
    }
  }
  // The must-show job: Qwen3-8B, gptq, 8 windows, within 6 GB on a 24 GB machine.
  const MemoryNeed n8 = need_of("8b", 8);
  EXPECT_LT(double(n8.fixed_bytes() + n8.buffer_bytes()), 6e9);
  EXPECT_NE(n8.peak_matrix.find("ffn_down"), std::string::npos) << n8.peak_matrix;  // cols = 12288: 16·cols² dominates
  // The window buffers grow with the windows, the fixed part does not (beyond the gather rows).
  const MemoryNeed n8w = need_of("8b", 128);
  EXPECT_NEAR(double(n8w.buffer_bytes()) / double(n8.buffer_bytes()), 16.0, 1e-9);
}

TEST(MemoryPlan, DoesNotGrowWithTheNumberOfBlocks) {
  const MemoryNeed a = need_of("1.7b", 8, 4), b = need_of("1.7b", 8, 64);
  EXPECT_EQ(a.fixed_bytes(), b.fixed_bytes());
  EXPECT_EQ(a.buffer_bytes(), b.buffer_bytes());
}

TEST(MemoryPlan, SpillsTheLargestBuffersFirstAndRefusesBelowTheFixedPart) {
  const MemoryNeed n = need_of("4b", 128);
  ASSERT_FALSE(n.buffers.empty());
  ASSERT_EQ(n.buffers.size(), 3u);
  const uint64_t fixed = n.fixed_bytes(), all = fixed + n.buffer_bytes();
  const MemoryPlacement none = place_memory(n, all, "test");
  EXPECT_EQ(none.spilled_bytes, 0u);
  EXPECT_EQ(none.ram_bytes, all);
  // Just short of everything: only the largest buffer (the wide inputs) goes to a file.
  const MemoryPlacement one = place_memory(n, all - 1, "test");
  EXPECT_EQ(one.spill, (std::vector<bool>{false, false, true}));
  EXPECT_LE(one.ram_bytes, all - 1);
  const MemoryPlacement every = place_memory(n, fixed, "test");
  EXPECT_EQ(every.spill, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(every.ram_bytes, fixed);
  try {
    place_memory(n, fixed - 1, "--max-memory");
    FAIL() << "a limit below the fixed part was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--max-memory is"), std::string::npos) << m;
    EXPECT_NE(m.find(n.peak_matrix), std::string::npos) << m;
  }
}

// --device cuda: a block that does not fit the GPU is refused before any work, naming the device
// and the largest part of the need (no device needed: the prediction is from the shapes).
TEST(MemoryPlan, ABlockThatDoesNotFitTheGpuIsRefused) {
  bool tied = false;
  const ModelConfig c = synth_config("qwen3", "8b", &tied);
  const std::vector<MemoryItem> need = predict_device_memory(c, default_plan(c, tied), calibrated(128));
#ifndef BONSAI_HAVE_QUANT_CUDA
  EXPECT_TRUE(need.empty());
  GTEST_SKIP() << "a build without CUDA predicts no GPU memory";
#else
  uint64_t total = 0;
  for (const MemoryItem& i : need) total += i.bytes;
  EXPECT_GT(total, uint64_t(3) << 30);   // gptq of ffn_down alone: 16 · 12288² bytes
  EXPECT_LT(total, uint64_t(16) << 30);  // one block of 8B fits a 16 GB card
  check_device_memory(need, total, "cuda:0");
  try {
    check_device_memory(need, total - 1, "cuda:0");
    FAIL() << "a need above the free memory was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:0: one block of this job needs"), std::string::npos) << m;
    EXPECT_NE(m.find("gptq"), std::string::npos) << m;
  }
#endif
}
