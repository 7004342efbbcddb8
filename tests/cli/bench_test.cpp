// `bonsai bench` from the command line: the JSON object scripts read (the keys issue 3 names, and
// --profile's table of where a generated token's time goes), the text table, and --profile's
// refusal on a device that queues its calls.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "support.h"

namespace {

// A synthetic model of the tiny size in PTQ1_0, made once.
const std::string& tiny_model() {
  static const std::string path = [] {
    const std::string p = (bonsai::test::scratch_dir() / "cli-bench-tiny.gguf").string();
    std::string out;
    EXPECT_EQ(bonsai::test::run_bonsai("synth --size tiny --type ptq1_0 -o '" + p + "'", &out), 0) << out;
    return p;
  }();
  return path;
}

}  // namespace

TEST(BenchCli, JsonHasTheSpeedTheRooflineAndTheProfile) {
  std::string out;
  ASSERT_EQ(bonsai::test::run_bonsai("bench -m '" + tiny_model() + "' -p 2 -n 3 -r 2 -t 1 --profile --json", &out), 0)
      << out;
  const auto j = nlohmann::json::parse(out);
  for (const char* key : {"pp_tps", "tg_tps", "bandwidth_gbs", "bytes_per_token", "roofline_pct", "peak_rss_bytes"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["tg_tps"].get<double>(), 0);
  // The probe's buffer (at least 256 MB) is left out of the peak RSS: the tiny model's run is far smaller.
  EXPECT_GE(j["probe_buffer_bytes"].get<int64_t>(), int64_t(256) << 20);
  EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), 0);
  EXPECT_LT(j["peak_rss_bytes"].get<int64_t>(), j["probe_buffer_bytes"].get<int64_t>());
  // The prompts' SGEMMs run on OpenBLAS kernels with AVX2 or more wherever the CPU has AVX2 and FMA,
  // also where OpenBLAS does not know the CPU's model and took SSE3 ones (runtime/cpu/blas_kernels.h).
  const std::string kernels = j["blas_kernels"].get<std::string>();
  if (!std::getenv("OPENBLAS_CORETYPE") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    const std::set<std::string> avx2_or_more = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
    EXPECT_TRUE(avx2_or_more.count(kernels)) << kernels;
  }
  const auto& p = j["profile"];
  EXPECT_EQ(p["tokens"].get<int>(), 6);
  ASSERT_GE(p["ops"].size(), 3u);
  EXPECT_EQ(p["ops"].back()["op"], "outside the backend calls");
  double share = 0, ms = 0;
  bool product = false;
  for (const auto& op : p["ops"]) {
    share += op["share_pct"].get<double>();
    ms += op["ms_per_token"].get<double>();
    if (op["op"].get<std::string>().rfind("matmul ", 0) == 0) {
      product = true;
      EXPECT_GT(op["gbs"].get<double>(), 0) << op["op"];
      EXPECT_GT(op["calls_per_token"].get<double>(), 0) << op["op"];
    }
  }
  EXPECT_TRUE(product);
  EXPECT_NEAR(share, 100, 1e-6);
  EXPECT_NEAR(ms, p["ms_per_token"].get<double>(), 1e-9 * ms + 1e-12);

  ASSERT_EQ(bonsai::test::run_bonsai("bench -m '" + tiny_model() + "' -p 2 -n 3 -r 1 -t 1 --json", &out), 0) << out;
  EXPECT_FALSE(nlohmann::json::parse(out).contains("profile"));
}

TEST(BenchCli, TextProfileTable) {
  std::string out;
  ASSERT_EQ(bonsai::test::run_bonsai("bench -m '" + tiny_model() + "' -p 2 -n 3 -r 1 -t 1 --profile", &out), 0) << out;
  EXPECT_NE(out.find("where a generated token's time goes (3 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("matmul attn_q+attn_k+attn_v (PTQ1_0"), std::string::npos) << out;
  EXPECT_NE(out.find("outside the backend calls"), std::string::npos) << out;
}
