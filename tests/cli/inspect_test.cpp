// `bonsai inspect` on the shared models: tensor counts, types and bits/weight, text and JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support.h"

namespace {

nlohmann::json inspect_json(const std::string& path) {
  std::string out;
  const int rc = bonsai::test::run_bonsai("inspect --json '" + path + "'", &out);
  EXPECT_EQ(rc, 0) << out;
  return nlohmann::json::parse(out);
}

}  // namespace

TEST(Inspect, SharedModels) {
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const struct {
    const char* rel;
    const char* format;
    size_t tensors;
    const char* type;
    double bpw;
  } cases[] = {
      {"models/stories260K/stories260K.gguf", "gguf", 48, "F32", 32.0},
      {"models/stories260K/stories260K.bin", "llama2c", 48, "F32", 32.0},
      {"models/zh-tiny-qwen3/model.safetensors", "safetensors", 68, "BF16", 16.0},
  };
  for (const auto& c : cases) {
    const auto j = inspect_json(bonsai::test::shared_file(c.rel).string());
    EXPECT_EQ(j["format"], c.format) << c.rel;
    EXPECT_EQ(j["tensors"].size(), c.tensors) << c.rel;
    EXPECT_EQ(j["totals"]["tensors"].get<size_t>(), c.tensors) << c.rel;
    EXPECT_DOUBLE_EQ(j["totals"]["bits_per_weight"].get<double>(), c.bpw) << c.rel;
    EXPECT_TRUE(j["totals"]["by_type"].contains(c.type)) << c.rel;
    for (const auto& t : j["tensors"]) {
      ASSERT_TRUE(t.contains("name") && t.contains("type") && t.contains("shape") && t.contains("bytes"));
    }
  }
  // The Hugging Face folder, as the runtime sees it: llama.cpp names, 68 tensors, tied head.
  const auto j = inspect_json(bonsai::test::shared_file("models/zh-tiny-qwen3").string());
  EXPECT_EQ(j["format"], "hf");
  EXPECT_EQ(j["tensors"].size(), 68u);
  EXPECT_EQ(j["metadata"]["general.architecture"], "qwen3");
  EXPECT_EQ(j["metadata"]["qwen3.block_count"], 6);
  EXPECT_EQ(j["totals"]["params"].get<int64_t>(), 43618304);  // README: total parameters
  // Long arrays are abbreviated in JSON too.
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["count"], 151936);
}

TEST(Inspect, TextOutputAndErrors) {
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  std::string out;
  ASSERT_EQ(bonsai::test::run_bonsai("inspect " + bonsai::test::shared_file("models/stories260K/stories260K.gguf").string(), &out), 0);
  EXPECT_NE(out.find("tensors:  48"), std::string::npos) << out;
  EXPECT_NE(out.find("blk.4.ffn_down.weight"), std::string::npos);
  EXPECT_NE(out.find("... (512 string)"), std::string::npos) << "vocabulary not abbreviated";
  EXPECT_NE(out.find("all"), std::string::npos);

  const auto dir = bonsai::test::scratch_dir();
  bonsai::test::write_bytes(dir / "bad.gguf", {'G', 'G', 'U', 'F', 9, 0, 0, 0});
  EXPECT_EQ(bonsai::test::run_bonsai("inspect " + (dir / "bad.gguf").string(), &out), 1);
  EXPECT_NE(out.find("bad.gguf"), std::string::npos) << out;
  EXPECT_EQ(bonsai::test::run_bonsai("inspect " + (dir / "missing.gguf").string(), &out), 1);
  EXPECT_NE(out.find("missing.gguf"), std::string::npos) << out;
  EXPECT_EQ(bonsai::test::run_bonsai("inspect", &out), 2) << out;
  EXPECT_NE(out.find("--help"), std::string::npos) << out;
}
