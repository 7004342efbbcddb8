// Bad models and bad texts: each a clear error naming what is wrong, never a crash.
#include <gtest/gtest.h>

#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/model_file.h"
#include "runtime/hadamard.h"
#include "runtime/load.h"
#include "runtime/perplexity.h"
#include "support.h"

using namespace bonsai;

namespace {

// stories260K.gguf rewritten with `edit` applied to its tensors / metadata.
std::string edited(const std::function<void(TensorSet&)>& edit) {
  TensorSet ts = read_gguf(test::shared_file("models/stories260K/stories260K.gguf").string());
  edit(ts);
  const std::string out = (test::scratch_dir() / "edited.gguf").string();
  write_gguf(out, ts.meta, ts.tensors);
  return out;
}

std::string load_error(const std::string& path) {
  try {
    load_model(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelErrors, MissingTensorWrongShapeUnknownArch) {
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  auto missing = edited([](TensorSet& ts) {
    std::erase_if(ts.tensors, [](const Tensor& t) { return t.name == "blk.2.ffn_up.weight"; });
  });
  std::string e = load_error(missing);
  EXPECT_NE(e.find("blk.2.ffn_up.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  EXPECT_NE(e.find(missing), std::string::npos) << e;

  auto shape = edited([](TensorSet& ts) {
    for (Tensor& t : ts.tensors)
      if (t.name == "blk.0.attn_k.weight") t.ne = {32, 64};  // same bytes, transposed shape
  });
  e = load_error(shape);
  EXPECT_NE(e.find("blk.0.attn_k.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("expected [64, 32]"), std::string::npos) << e;

  auto arch = edited([](TensorSet& ts) { ts.meta.set_str("general.architecture", "mamba"); });
  e = load_error(arch);
  EXPECT_NE(e.find("unknown architecture 'mamba'"), std::string::npos) << e;
}

TEST(ModelErrors, TextShorterThanTwoContexts) {
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const auto m = load_model(test::shared_file("models/stories260K/stories260K.gguf").string());
  auto be = make_backend("cpu", 1);
  const auto tok = model_tokenizer(*m);
  PerplexityOptions o;
  o.n_ctx = 128;
  const auto ids = tok->encode("Once upon a time there was a cat.", true, false);
  try {
    perplexity(*m, *be, ids, o, "short.txt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs at least 256"), std::string::npos) << e.what();
  }
}

TEST(ModelErrors, BadHadamardDeclarations) {
  Metadata meta;
  EXPECT_TRUE(read_hadamard(meta, "x.gguf").empty());
  HadamardSpec s;
  s.block = 64;
  s.signs[64] = std::vector<float>(64, 1.0f);
  s.weights = {"blk.0.attn_q.weight"};
  write_hadamard(s, meta);
  const HadamardSpec back = read_hadamard(meta, "x.gguf");
  EXPECT_EQ(back.block, 64);
  EXPECT_EQ(back.weights, s.weights);
  auto bad = [&](const std::function<void(Metadata&)>& f, const char* want) {
    Metadata m = meta;
    f(m);
    try {
      read_hadamard(m, "x.gguf");
      ADD_FAILURE() << "accepted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  bad([](Metadata& m) { m.set_u32("prism.hadamard.block_size", 48); }, "power of two");
  bad([](Metadata& m) { m.set_str("prism.hadamard.transform", "dct"); }, "transform");
  bad([](Metadata& m) { m.set_i32s("prism.hadamard.sign_values", std::vector<int32_t>(64, 2)); }, "+1 or -1");
  bad([](Metadata& m) { m.set_i32s("prism.hadamard.sign_widths", {100}); }, "multiple of 64");
  bad([](Metadata& m) { m.set_strings("prism.hadamard.weight_names", {}); }, "weight_names");
}

TEST(Hadamard, TransformIsOrthonormalAndFoldsExactly) {
  // H is its own inverse; folding W·S·H and rotating x gives W x.
  HadamardSpec s;
  s.block = 8;
  s.signs[16] = {1, -1, 1, 1, -1, -1, 1, -1, 1, 1, -1, 1, -1, 1, 1, -1};
  std::vector<float> x(16), w(16);
  for (int i = 0; i < 16; ++i) {
    x[size_t(i)] = float(i) * 0.25f - 1.5f;
    w[size_t(i)] = float((i * 7) % 5) - 2.0f;
  }
  double ref = 0;
  for (int i = 0; i < 16; ++i) ref += double(w[size_t(i)]) * x[size_t(i)];
  // The folded row w·S·H is (H S wᵀ)ᵀ: signs first, then H on each block of 8.
  std::vector<float> wf = w, xr = x;
  for (int i = 0; i < 16; ++i) wf[size_t(i)] *= s.signs[16][size_t(i)];
  fwht(wf.data(), 8);
  fwht(wf.data() + 8, 8);
  hadamard_forward(s, xr.data(), 1, 16);
  double got = 0;
  for (int i = 0; i < 16; ++i) got += double(wf[size_t(i)]) * xr[size_t(i)];
  EXPECT_NEAR(got, ref, 1e-5);
  // A lookup row stored rotated (z = H S e) maps back with hadamard_inverse.
  std::vector<float> z = wf;
  hadamard_inverse(s, z.data(), 1, 16);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(z[size_t(i)], w[size_t(i)], 1e-5);
  std::vector<float> y = x;
  fwht(y.data(), 16);
  fwht(y.data(), 16);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)], 1e-5);
}
