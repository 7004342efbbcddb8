// The pipeline on zh-tiny-qwen3 (Qwen3 layout, 256/768 wide): rotation folding leaves the
// perplexity unchanged, and an end-to-end calibrated PTQ1_0 quantization writes a GGUF and a
// .bonsai twin that load, measure the same, and whose ternary blocks are canonical (decode ->
// reference encode gives the same bytes); the second run reuses the statistics with no forward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/error.h"
#include "formats/model_file.h"
#include "formats/residual.h"
#include "quantize/canonical.h"
#include "quantize/grid4.h"
#include "quantize/pipeline.h"
#include "quantize/provenance.h"
#include "quantize/rotate.h"
#include "runtime/load.h"
#include "runtime/perplexity.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::quant;
namespace fs = std::filesystem;

namespace {

const char* kModel = "models/zh-tiny-qwen3";
const char* kEval = "corpora/zh/eval-debian-handbook-zh-CN.txt";
const char* kCalib = "corpora/zh/calib-fortunes-zh.txt";

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every model here shares zh-tiny-qwen3's tokenizer (no BOS): the eval text is tokenized once.
PerplexityResult ppl(const Model& m, int64_t chunks) {
  static const std::vector<int32_t> tokens = model_tokenizer(m)->encode(read_text(test::shared_file(kEval)), false, false);
  auto be = make_backend("cpu", 0);
  PerplexityOptions o;
  o.n_ctx = 512;
  o.max_chunks = chunks;
  return perplexity(m, *be, tokens, o, kEval);
}

}  // namespace

TEST(ZhTiny, RotatedF32ModelHasTheSamePerplexity) {
  BONSAI_REQUIRE_SHARED(kModel);
  BONSAI_REQUIRE_SHARED(kEval);
  const TensorSet src = open_model(test::shared_file(kModel).string());
  const ModelConfig cfg = read_model_config(src);
  const auto plan_path = test::scratch_dir() / "f32.yaml";
  std::ofstream(plan_path) << "default: F32\n";
  const ResolvedPlan rp = resolve_plan(load_plan(plan_path.string()), src.tensors, cfg.n_layer, std::nullopt, Method::rtn);
  std::vector<std::pair<std::string, int64_t>> rotated;
  for (const auto& t : rp.tensors)
    if (t.block >= 0 && t.ne.size() == 2) rotated.emplace_back(t.name, t.ne[0]);
  const auto plain = working_model(src, rp, nullptr);
  const PerplexityResult a = ppl(*plain, 2);
  EXPECT_EQ(a.chunks, 2);
  EXPECT_FALSE(model_tokenizer(*plain)->add_bos_default());
  for (int64_t block : {128, 256}) {
    const HadamardSpec spec = make_rotation(rotated, block, 1);
    const auto rot = working_model(src, rp, &spec);
    const PerplexityResult b = ppl(*rot, 2);
    EXPECT_NEAR(b.ppl / a.ppl, 1.0, 1e-4) << "block " << block << ": " << a.ppl << " vs " << b.ppl;
  }
}

TEST(ZhTiny, CalibratedPtq1EndToEndAndStatisticsReuse) {
  BONSAI_REQUIRE_SHARED(kModel);
  BONSAI_REQUIRE_SHARED(kEval);
  BONSAI_REQUIRE_SHARED(kCalib);
  const auto dir = test::scratch_dir();
  const std::string model = test::shared_file(kModel).string(), calib = test::shared_file(kCalib).string();
  const std::string gguf = (dir / "q.gguf").string(), bon = (dir / "q.bonsai").string(), stats = (dir / "s.gguf").string();

  // Run 1, through the CLI: calibrate (8 windows × 256) with gptq, rotate, save the statistics.
  std::string log;
  const std::string args = "quantize -m " + model + " -o " + gguf + " --calib " + calib +
                           " --calib-windows 8 --calib-len 256 --method gptq --rotate hadamard --rotate-block 128 --seed 5"
                           " --stats " + stats;
  ASSERT_EQ(test::run_bonsai(args, &log), 0) << log;
  EXPECT_NE(log.find("blk.5.ffn_down.weight"), std::string::npos) << log;  // the plan table
  EXPECT_NE(log.find("calibrate blocks: 6/6"), std::string::npos) << log;
  EXPECT_NE(log.find("statistics saved to " + stats), std::string::npos) << log;
  EXPECT_NE(log.find("peak RSS"), std::string::npos) << log;
  EXPECT_EQ(log.find("no model forward"), std::string::npos) << log;
  ASSERT_TRUE(fs::exists(stats));

  const TensorSet g = open_model(gguf);
  EXPECT_EQ(g.meta.get_int("general.file_type"), 143);
  EXPECT_EQ(g.meta.get_int("general.quantization_version"), 2);
  EXPECT_EQ(g.meta.get_int("prism.hadamard.block_size"), 128);
  EXPECT_TRUE(g.meta.has("tokenizer.ggml.tokens"));
  EXPECT_EQ(g.get("token_embd.weight").type, TypeId::Q8_0);
  EXPECT_EQ(g.get("blk.0.attn_norm.weight").type, TypeId::F32);
  int ternary = 0;
  for (const Tensor& t : g.tensors) {
    if (t.type != TypeId::PTQ1_0) continue;
    ++ternary;
    // Canonical blocks: the reference encoder re-encodes the decoded values to the same bytes.
    EXPECT_EQ(first_noncanonical_block(t), -1) << t.name;
  }
  EXPECT_EQ(ternary, 42);

  // Run 2, in process: the same statistics, no forward, a .bonsai.
  QuantizeOptions o;
  o.source = model;
  o.output = bon;
  o.calib_files = {calib};
  o.calib_windows = 8;
  o.calib_len = 256;
  o.method = Method::gptq;
  o.rotate = true;
  o.seed = 5;
  o.stats_path = stats;
  std::string log2;
  QuantizeEvents ev;
  ev.info = [&](const std::string& s) { log2 += s + "\n"; };
  const int64_t runs0 = calib::block_runs();
  const QuantizeResult r = quantize_model(o, ev);
  EXPECT_EQ(calib::block_runs(), runs0);
  EXPECT_TRUE(r.stats_loaded);
  EXPECT_NE(log2.find("statistics loaded from " + stats + ": no model forward"), std::string::npos) << log2;
  ASSERT_EQ(r.errors.size(), 42u);
  for (const auto& e : r.errors) {
    EXPECT_TRUE(e.gram) << e.name;
    EXPECT_GT(e.rel_error, 0.0) << e.name;
    EXPECT_LT(e.rel_error, 1.0) << e.name;
  }

  // The twins hold the same tensors, byte for byte.
  const TensorSet b = open_model(bon);
  ASSERT_EQ(b.tensors.size(), g.tensors.size());
  for (const Tensor& t : g.tensors) {
    const Tensor& u = b.get(t.name);
    ASSERT_EQ(u.type, t.type) << t.name;
    ASSERT_EQ(u.nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u.data, t.data, t.nbytes), 0) << t.name;
  }
  // .bonsai records plan, provenance and errors.
  const auto plan = nlohmann::json::parse(*b.meta.get_str("bonsai.plan"));
  EXPECT_EQ(plan["tensors"]["blk.2.attn_v.weight"]["method"], "gptq");
  EXPECT_EQ(*b.meta.get_str("bonsai.provenance.source_sha256"), source_sha256(model));
  EXPECT_EQ(*b.meta.get_str("bonsai.provenance.calib_sha256"), sha256_files({calib}));
  const auto errs = nlohmann::json::parse(*b.meta.get_str("bonsai.quant.layer_errors"));
  EXPECT_EQ(errs.size(), 42u);
  const auto manifest = nlohmann::json::parse(*b.meta.get_str("bonsai.calib.manifest"));
  EXPECT_EQ(manifest["windows"], 8);
  EXPECT_EQ(manifest["rotation"]["block"], 128);

  // Both load and measure the same, finite perplexity.
  const PerplexityResult pg = ppl(*load_model(gguf), 2), pb = ppl(*load_model(bon), 2);
  EXPECT_TRUE(std::isfinite(pg.ppl));
  EXPECT_EQ(pg.ppl, pb.ppl);

  // Statistics measured in the rotated basis cannot serve an unrotated run.
  o.rotate = false;
  o.output = (dir / "x.gguf").string();
  try {
    quantize_model(o);
    FAIL() << "rotation mismatch accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rotation"), std::string::npos) << e.what();
  }
}

// Stage 2, data-free (rtn, so no calibration forward): `--type pq2_0` writes a pure PrismML PQ2_0
// GGUF whose blocks pass the golden decoder round trip tensor by tensor (formats' decoder ->
// canonical re-encode -> the same bytes) and the summary reports the share of code 3; with
// `--residual kmeans` the file carries linked residual tensors and bonsai.residual.* keys, and the
// runtime's lookup-table path gives the perplexity of the dequantised reference (every block
// weight replaced by F32 Ŵ + R̂, no residual tensors).
TEST(ZhTinyStage2, Pq2GridFileIsCanonicalAndResidualMatchesTheDequantisedReference) {
  BONSAI_REQUIRE_SHARED(kModel);
  BONSAI_REQUIRE_SHARED(kEval);
  const auto dir = test::scratch_dir();
  const std::string model = test::shared_file(kModel).string(), pq2 = (dir / "pq2.gguf").string();

  std::string log;
  ASSERT_EQ(test::run_bonsai("quantize -m " + model + " -o " + pq2 + " --method rtn --type pq2_0", &log), 0) << log;
  EXPECT_NE(log.find("code 3 (+2d) share over the PQ2_0 weights"), std::string::npos) << log;
  EXPECT_NE(log.find("PrismML's layout (type 142)"), std::string::npos) << log;
  const TensorSet g = open_model(pq2);
  EXPECT_EQ(g.meta.get_int("general.file_type"), 141);  // llama.cpp's file type of PQ2_0
  EXPECT_FALSE(g.meta.has("bonsai.residual.scheme"));
  int blocks = 0;
  int64_t plus2 = 0, total = 0;
  const TypeTraits& tt = traits(TypeId::PQ2_0);
  for (const Tensor& t : g.tensors) {
    EXPECT_EQ(t.name.find(".rc_"), std::string::npos) << t.name;
    if (t.type != TypeId::PQ2_0) continue;
    ++blocks;
    std::vector<float> y(size_t(t.nelements()));
    tt.to_float(t.data, y.data(), t.nelements());
    TernaryMatrix q;
    q.rows = t.rows();
    q.cols = t.ne[0];
    q.codes.resize(y.size());
    q.scales.resize(y.size() / kGroup);
    for (size_t b = 0; b < q.scales.size(); ++b)
      q.scales[b] = reencode_grid4(y.data() + b * kGroup, kGroup, q.codes.data() + b * kGroup);
    const auto again = q.pack(TypeId::PQ2_0);
    ASSERT_EQ(again.size(), t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(again.data(), t.data, t.nbytes), 0) << t.name;
    plus2 += int64_t(share_of_plus2(q) * double(q.codes.size()) + 0.5);
    total += int64_t(q.codes.size());
  }
  EXPECT_EQ(blocks, 42);
  EXPECT_GT(plus2, 0);
  EXPECT_LT(plus2, total / 5);

  // --from: stage 2 started from a saved stage-1 result gives the same tensors as one job.
  const std::string s1 = (dir / "s1.bonsai").string(), from = (dir / "from.gguf").string();
  ASSERT_EQ(test::run_bonsai("quantize -m " + model + " -o " + s1 + " --method rtn", &log), 0) << log;
  ASSERT_EQ(test::run_bonsai("quantize -m " + model + " -o " + from + " --method rtn --type pq2_0 --from " + s1, &log), 0)
      << log;
  const TensorSet f = open_model(from);
  for (const Tensor& t : g.tensors) {
    const Tensor& u = f.get(t.name);
    ASSERT_EQ(u.nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u.data, t.data, t.nbytes), 0) << t.name;
  }
  log.clear();
  EXPECT_NE(test::run_bonsai("quantize -m " + model + " -o " + (dir / "x.gguf").string() + " --method rtn --type pq2_0 --from " +
                                 pq2,
                             &log),
            0);
  EXPECT_NE(log.find("it is a stage-2 result"), std::string::npos) << log;

  // The residual: .bonsai with linked tensors, loaded and run through the lookup tables.
  const std::string rc = (dir / "rc.bonsai").string();
  log.clear();
  ASSERT_EQ(test::run_bonsai("quantize -m " + model + " -o " + rc +
                                 " --method rtn --type pq2_0 --residual kmeans --rc-dim 8 --rc-size 16 --rc-rows 64",
                             &log),
            0)
      << log;
  EXPECT_NE(log.find("loads only in bonsai"), std::string::npos) << log;
  const auto m = load_model(rc);
  ASSERT_EQ(m->residuals.size(), 42u);
  EXPECT_EQ(m->file.meta.get_str("bonsai.residual.scheme"), std::optional<std::string>("kmeans"));

  // Both sides in F32, so the only difference is the product: (a) each block weight's base
  // decoded to F32 with its residual tensors kept (the lookup-table path), (b) each block weight
  // expanded to F32 Ŵ + R̂ without residual tensors (the dequantised reference).
  auto f32_model = [&](bool expand) {
    TensorSet ts;
    ts.path = expand ? "(dequantised reference)" : "(F32 base + residual)";
    ts.format = "gguf";
    ts.meta = m->file.meta;
    for (const Tensor& t : m->file.tensors) {
      if (t.name.ends_with(kRcCodebookSuffix) || t.name.ends_with(kRcIndexSuffix)) {
        if (!expand) ts.add(t);
        continue;
      }
      ResidualView v;
      if (!find_residual(m->file, t, &v)) {
        ts.add(t);
        continue;
      }
      std::vector<float> w(size_t(t.nelements()));
      traits(t.type).to_float(t.data, w.data(), t.nelements());
      if (expand) {
        const auto r = v.dequantize();
        for (size_t i = 0; i < w.size(); ++i) w[i] += r[i];
      }
      Tensor f = t;
      f.type = TypeId::F32;
      f.nbytes = w.size() * 4;
      uint8_t* d = ts.alloc(f.nbytes);
      std::memcpy(d, w.data(), f.nbytes);
      f.data = d;
      ts.add(f);
    }
    return load_model(std::move(ts));
  };
  const auto lut = f32_model(false), ref = f32_model(true);
  EXPECT_EQ(lut->residuals.size(), 42u);
  EXPECT_TRUE(ref->residuals.empty());
  const double p_lut = ppl(*lut, 2).ppl, p_ref = ppl(*ref, 2).ppl;
  // The CPU's 4-bit lookup rounds each token's tables to int8 (runtime/cpu/residual.h states the
  // bound), as its matmuls round activations: 2.4e-4 on these rtn residuals, the largest a method
  // leaves (the gptq file of docs/results.md: 5e-5). A residual on the wrong rows moves it by %.
  EXPECT_NEAR(p_lut, p_ref, 5e-4 * p_ref);
  const double p_rc = ppl(*m, 2).ppl, p_grid = ppl(*load_model(pq2), 2).ppl;
  EXPECT_NE(p_rc, p_grid);  // the residual is applied
}
