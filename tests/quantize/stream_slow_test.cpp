// The streaming job writes, byte for byte, what the pipeline wrote while it held the whole model
// in memory: zh-tiny-qwen3 with the default plan and options (gptq, 128 windows × 512 tokens of
// the default calibration text). The in-memory reference is that pipeline's composition of the
// same parts: working_model (every block weight an F32 copy, all at once), calibrate_blocks over
// the whole model with every statistic kept, quantize_matrix for each weight as its group's input
// is measured, and one write of every tensor at the end.
#include <gtest/gtest.h>

#include <deque>
#include <map>

#include "calibrate/runner.h"
#include "datasets/window_sampler.h"
#include "formats/model_file.h"
#include "quantize/matrix_quant.h"
#include "quantize/pipeline.h"
#include "runtime/load.h"
#include "quantize/job_support.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::quant;
namespace fs = std::filesystem;

namespace {

const char* kModel = "models/zh-tiny-qwen3";

// The pre-streaming pipeline's tensors for the default job, in the source's order.
std::vector<Tensor> in_memory_tensors(const TensorSet& src, const std::vector<std::string>& calib, TensorSet& owner,
                                      std::deque<Tensor>& quantized, std::unique_ptr<Model>& m) {
  const ModelConfig cfg = read_model_config(src);
  const ResolvedPlan rp = resolve_plan(load_plan(kDefaultPlan), src.tensors, cfg.n_layer, std::nullopt, kDefaultMethod);
  m = working_model(src, rp, nullptr);
  const auto tok = model_tokenizer(*m);
  datasets::SampledWindows w = datasets::sample_windows(*tok, calib, 128, 512, 0);
  if (tok->add_bos_default()) w.begin_each_with(tok->bos());
  std::map<std::string, const Tensor*> by_name;
  calib::CalibrateOptions co;
  co.gram = rp.needs_gram();
  calib::calibrate_blocks(*m, w.ids, 128, 512, co, [&](int64_t l, const std::string& input, calib::Stats& s) {
    for (const Tensor** slot : m->layers[size_t(l)].slots()) {
      const Tensor& t = **slot;
      if (calib::input_key(t.name) != input) continue;
      InputMoments mom = input_moments(s.by_weight.at(input), false);
      quantized.push_back(quantize_matrix(t, reinterpret_cast<const float*>(t.data), *rp.find(t.name), &mom,
                                          MethodOptions{}, owner, nullptr, {}));
      *slot = by_name[t.name] = &quantized.back();
    }
  });
  std::vector<Tensor> out;
  for (const Tensor& t : m->file.tensors) {
    if (auto it = by_name.find(t.name); it != by_name.end()) out.push_back(*it->second);
    else if (t.ne.size() < 2 && t.type != TypeId::F32) out.push_back(convert_tensor(t, TypeId::F32, owner));
    else out.push_back(t);
  }
  return out;
}

}  // namespace

TEST(StreamingJob, WritesWhatTheInMemoryPipelineWrote) {
  BONSAI_REQUIRE_SHARED(kModel);
  BONSAI_REQUIRE_SHARED("corpora/zh");
  const auto dir = test::scratch_dir();
  const std::string model = test::shared_file(kModel).string();
  QuantizeOptions o;  // the defaults: plan, method, calibration windows, seed
  o.source = model;
  o.output = (dir / "streamed.gguf").string();
  {
    const test::ScopedEnv shared("BONSAI_SHARED_DIR", test::shared_dir().string());
    o.calib_files = default_calib_files();  // what the command line takes without --calib
  }
  ASSERT_FALSE(o.calib_files.empty());
  const QuantizeResult r = quantize_model(o);
  EXPECT_TRUE(r.calibrated);
  EXPECT_GT(r.peak_anon_bytes, 0);
  EXPECT_GT(r.predicted_ram_bytes, uint64_t(r.peak_anon_bytes)) << "the prediction is an upper bound";

  const TensorSet src = open_model(model);
  TensorSet owner;
  std::deque<Tensor> quantized;
  std::unique_ptr<Model> m;
  const std::vector<Tensor> ref = in_memory_tensors(src, o.calib_files, owner, quantized, m);
  const TensorSet streamed = open_model(o.output);
  const fs::path ref_path = dir / "in-memory.gguf";
  write_model(ref_path.string(), streamed.meta, ref);
  ASSERT_EQ(streamed.tensors.size(), ref.size());
  EXPECT_TRUE(test::read_bytes(o.output) == test::read_bytes(ref_path));
}

// With --max-memory at the fixed part of the prediction every calibration buffer spills to a file
// in OUT.partial/ (unlinked at once: nothing is left) and the job writes the same bytes.
TEST(StreamingJob, SpilledCalibrationBuffersGiveTheSameBytes) {
  BONSAI_REQUIRE_SHARED(kModel);
  BONSAI_REQUIRE_SHARED("corpora/zh");
  const auto dir = test::scratch_dir();
  QuantizeOptions o;
  o.source = test::shared_file(kModel).string();
  o.output = (dir / "ram.gguf").string();
  o.calib_windows = 6;
  o.calib_len = 128;
  o.rotate = true;  // the hidden states then pass through the rotation too
  {
    const test::ScopedEnv shared("BONSAI_SHARED_DIR", test::shared_dir().string());
    o.calib_files = default_calib_files();
  }
  const QuantizeResult in_ram = quantize_model(o);
  EXPECT_EQ(in_ram.spilled_bytes, 0u);
  // The prediction's fixed part, from a dry run's own numbers: every buffer must go to a file.
  QuantizeOptions dry = o;
  dry.dry_run = true;
  const uint64_t buffers = 4ull * 6 * 128 * (256 + 256 + 768);
  o.max_memory = quantize_model(dry).predicted_ram_bytes - buffers;
  o.output = (dir / "spilled.gguf").string();
  const QuantizeResult spilled = quantize_model(o);
  EXPECT_EQ(spilled.spilled_bytes, buffers);
  EXPECT_TRUE(test::read_bytes(o.output) == test::read_bytes(dir / "ram.gguf"));
  EXPECT_FALSE(fs::exists(o.output + ".partial"));
}
