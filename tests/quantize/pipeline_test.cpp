// The pipeline's fast checks on stories260K (64-wide, too narrow for 128-element ternary blocks):
// the window sampler stand-in, rotation folding exactness through the whole model, the working
// model's types, and a data-free quantization end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "formats/error.h"
#include "formats/model_file.h"
#include "quantize/pipeline.h"
#include "quantize/rotate.h"
#include "runtime/load.h"
#include "runtime/perplexity.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::quant;
namespace fs = std::filesystem;

namespace {

const char* kModel = "models/stories260K/stories260K.gguf";
const char* kText = "corpora/en/tinystories_validation_100.txt";

std::string write_plan(const std::string& text) {
  const auto p = test::scratch_dir() / "plan.yaml";
  std::ofstream(p) << text;
  return p.string();
}

PerplexityResult ppl(const Model& m, int64_t ctx, int64_t chunks) {
  auto be = make_backend("cpu", 0);
  const auto tok = model_tokenizer(m);
  std::ifstream f(test::shared_file(kText), std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  PerplexityOptions o;
  o.n_ctx = ctx;
  o.max_chunks = chunks;
  o.add_bos = tok->add_bos_default();
  o.bos = tok->bos();
  return perplexity(m, *be, tok->encode(ss.str(), o.add_bos, false), o, kText);
}

}  // namespace

TEST(WorkingModel, RotationLeavesPerplexityUnchanged) {
  BONSAI_REQUIRE_SHARED(kModel);
  const TensorSet src = open_model(test::shared_file(kModel).string());
  const ModelConfig cfg = read_model_config(src);
  const ResolvedPlan rp = resolve_plan(load_plan(write_plan("default: F32\n")), src.tensors, cfg.n_layer, std::nullopt, Method::rtn);
  std::vector<std::pair<std::string, int64_t>> rotated;
  for (const auto& t : rp.tensors)
    if (t.block >= 0 && t.ne.size() == 2) rotated.emplace_back(t.name, t.ne[0]);
  EXPECT_EQ(rotated.size(), size_t(7 * cfg.n_layer));
  const HadamardSpec spec = make_rotation(rotated, 4, 3);  // 64 and 172 are multiples of 4
  const auto plain = working_model(src, rp, nullptr);
  const auto rot = working_model(src, rp, &spec);
  EXPECT_EQ(rot->hadamard.block, 4);
  EXPECT_EQ(plain->layers[0].wq->type, TypeId::F32);
  EXPECT_NE(std::memcmp(plain->layers[0].down->data, rot->layers[0].down->data, plain->layers[0].down->nbytes), 0);
  const double a = ppl(*plain, 128, 4).ppl, b = ppl(*rot, 128, 4).ppl;
  EXPECT_NEAR(b / a, 1.0, 1e-4) << a << " vs " << b;
  EXPECT_THROW(make_rotation(rotated, 64, 3), Error);  // 172 is not a multiple of 64
}

TEST(Pipeline, DataFreePlanWritesAModelThatRuns) {
  BONSAI_REQUIRE_SHARED(kModel);
  const auto dir = test::scratch_dir();
  QuantizeOptions o;
  o.source = test::shared_file(kModel).string();
  o.output = (dir / "q8.gguf").string();
  // ffn_down's rows of 172 hold no whole Q8_0 block of 32.
  o.plan = write_plan("default: Q8_0\nrules:\n  - match: 'ffn_down'\n    type: F16\n");
  std::string log;
  QuantizeEvents ev;
  ev.info = [&](const std::string& s) { log += s + "\n"; };
  const int64_t runs0 = calib::block_runs();
  const QuantizeResult r = quantize_model(o, ev);
  EXPECT_EQ(calib::block_runs(), runs0);  // Q8_0 needs no statistics: no forward
  EXPECT_FALSE(r.calibrated);
  // Each stage carries the high-water mark at its end: positive, never falling.
  ASSERT_FALSE(r.stages.empty());
  for (size_t i = 0; i < r.stages.size(); ++i) {
    EXPECT_GT(r.stages[i].peak_rss_bytes, 0) << r.stages[i].name;
    if (i > 0) {
      EXPECT_GE(r.stages[i].peak_rss_bytes, r.stages[i - 1].peak_rss_bytes) << r.stages[i].name;
    }
  }
  EXPECT_LE(r.stages.back().peak_rss_bytes, r.peak_rss_bytes);
  EXPECT_NE(log.find("blk.4.ffn_down.weight"), std::string::npos) << log;
  EXPECT_EQ(r.errors.size(), 35u);
  for (const auto& e : r.errors) EXPECT_LT(e.rel_error, 1e-3) << e.name;
  const TensorSet out = open_model(o.output);
  EXPECT_EQ(out.meta.get_int("general.file_type"), int64_t(llama_file_type(TypeId::Q8_0)));
  EXPECT_EQ(out.get("blk.0.attn_q.weight").type, TypeId::Q8_0);
  EXPECT_EQ(out.get("blk.0.ffn_down.weight").type, TypeId::F16);
  EXPECT_EQ(out.get("blk.0.attn_norm.weight").type, TypeId::F32);
  // Non-ternary types come from the reference encoders: exactly what convert_tensor writes.
  TensorSet src = open_model(o.source);
  int compared = 0;
  for (const Tensor& t : out.tensors) {
    if (t.ne.size() < 2) continue;
    const Tensor u = convert_tensor(src.get(t.name), t.type, src);
    ASSERT_EQ(t.nbytes, u.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(t.data, u.data, t.nbytes), 0) << t.name;
    ++compared;
  }
  EXPECT_EQ(compared, 37);  // 35 block matrices, token_embd, output
  const auto m = load_model(o.output);
  EXPECT_NEAR(ppl(*m, 128, 4).ppl, ppl(*load_model(o.source), 128, 4).ppl, 0.05);

  // --dry-run: the table only.
  o.output = (dir / "dry.gguf").string();
  o.dry_run = true;
  log.clear();
  quantize_model(o, ev);
  EXPECT_FALSE(fs::exists(o.output));
  EXPECT_NE(log.find("bits/weight"), std::string::npos);
}

TEST(Pipeline, ErrorsBeforeAnyWork) {
  BONSAI_REQUIRE_SHARED(kModel);
  QuantizeOptions o;
  o.source = test::shared_file(kModel).string();
  o.output = (test::scratch_dir() / "x.txt").string();
  o.plan = write_plan("default: F16\n");
  EXPECT_THROW(quantize_model(o), Error);  // output extension
  o.output = (test::scratch_dir() / "x.gguf").string();
  o.rotate = true;
  o.rotate_block = 64;
  try {
    quantize_model(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the input width 172"), std::string::npos) << e.what();
  }
  o.rotate = false;
  o.plan = "ternary-all";  // 64-wide rows
  EXPECT_THROW(quantize_model(o), Error);
}

TEST(QuantizeCli, DryRunAndOptionErrors) {
  BONSAI_REQUIRE_SHARED(kModel);
  const std::string m = test::shared_file(kModel).string();
  const std::string plan = write_plan("default: F16\n");
  std::string out;
  EXPECT_EQ(test::run_bonsai("quantize -m " + m + " --plan " + plan + " --dry-run", &out), 0) << out;
  EXPECT_NE(out.find("blk.4.ffn_down.weight"), std::string::npos) << out;
  EXPECT_NE(out.find("16.0000 bits/weight"), std::string::npos) << out;
  EXPECT_EQ(test::run_bonsai("quantize -m " + m + " --plan " + plan, &out), 2) << out;  // no -o
  EXPECT_NE(out.find("--out"), std::string::npos) << out;
  EXPECT_EQ(test::run_bonsai("quantize -m " + m + " -o x.gguf --rotate givens", &out), 2) << out;
  EXPECT_NE(out.find("--rotate must be none or hadamard"), std::string::npos) << out;
  EXPECT_EQ(test::run_bonsai("quantize -m " + m + " -o x.gguf --gptq-passes 0", &out), 1) << out;
  EXPECT_NE(out.find("gptq passes 0 must be >= 1"), std::string::npos) << out;
  EXPECT_EQ(test::run_bonsai("quantize -m " + m + " -o x.gguf --gptq-descent -1", &out), 1) << out;
  EXPECT_NE(out.find("gptq descent rounds -1 must be >= 0"), std::string::npos) << out;
  EXPECT_EQ(test::run_bonsai("quantize -m " + m + " -o x.gguf --tune-lr nan", &out), 1) << out;
  EXPECT_NE(out.find("tune learning rate nan must be > 0"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists("x.gguf.partial"));  // refused before the job's checkpoint folder
  EXPECT_EQ(test::run_bonsai("quantize -m " + m + " -o x.gguf --method best", &out), 1) << out;
  EXPECT_NE(out.find("best"), std::string::npos) << out;
  EXPECT_EQ(test::run_bonsai("quantize -m " + m + " -o x.gguf --plan no-such-preset", &out), 1) << out;
  EXPECT_NE(out.find("no such plan file, and not a preset"), std::string::npos) << out;
  const auto dir = test::scratch_dir();
  const std::string bad_stats = (dir / "bad.gguf").string();
  test::write_bytes(bad_stats, {'G', 'G', 'U', 'F', 3, 0});
  EXPECT_EQ(test::run_bonsai("quantize -m " + m + " -o " + (dir / "y.gguf").string() + " --plan " + plan + " --stats " + bad_stats, &out), 1)
      << out;
  EXPECT_NE(out.find(bad_stats), std::string::npos) << out;
}
