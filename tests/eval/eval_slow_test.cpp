// `bonsai eval` end to end on zh-tiny-qwen3: 4 models x 2 texts with a KLD base; killed after its
// third cell, run again: the finished cells are skipped (and a model whose cells are all finished
// is not loaded), and every CSV figure is the single `bonsai perplexity` command's, exactly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/text_file.h"
#include "quantize/job_support.h"
#include "support.h"

using namespace bonsai;
namespace fs = std::filesystem;

namespace {

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::stringstream in(read_text_file(path));
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    if (!line.empty() && line.back() == ',') f.push_back("");
    rows.push_back(f);
  }
  return rows;
}

}  // namespace

TEST(EvalJob, KilledAndResumedMatchesTheSingleCommands) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/config.json");
  BONSAI_REQUIRE_SHARED("corpora/zh/eval-debian-handbook-zh-CN.txt");
  const auto dir = test::scratch_dir();
  const std::string base = test::shared_file("models/zh-tiny-qwen3").string();
  const std::string zh = read_text_file(test::shared_file("corpora/zh/eval-debian-handbook-zh-CN.txt").string());
  write_text_file((dir / "zh1.txt").string(), zh.substr(0, 30000));
  write_text_file((dir / "zh2.txt").string(), zh.substr(200000, 30000));
  std::string log;
  for (const char* ty : {"q8_0", "f32", "f16"})
    ASSERT_EQ(test::run_bonsai("convert -m " + base + " -o " + (dir / (std::string(ty) + ".gguf")).string() + " --type " + ty,
                               &log), 0)
        << log;
  const std::string args = "eval --kl-base-model " + base + " --models " + (dir / "q8_0.gguf").string() + " " +
                           (dir / "f32.gguf").string() + " " + (dir / "f16.gguf").string() + " --texts " +
                           (dir / "zh1.txt").string() + " " + (dir / "zh2.txt").string() +
                           " --ctx 64 --chunks 3 --kl-chunks 2 -o " + (dir / "out").string();
  {
    test::ScopedEnv kill("BONSAI_TEST_KILL_AT", "cell:3");
    ASSERT_EQ(test::run_bonsai(args, &log, {}), test::kKilled) << log;
  }
  EXPECT_EQ(test::entries(dir / "out" / "cells"),
            (std::set<std::string>{"zh-tiny-qwen3@zh1.json", "zh-tiny-qwen3@zh2.json", "q8_0@zh1.json"}));
  EXPECT_FALSE(fs::exists(dir / "out" / "eval.csv"));
  ASSERT_EQ(test::run_bonsai(args, &log), 0) << log;
  EXPECT_NE(log.find("5 of 8 cells to measure"), std::string::npos) << log;
  EXPECT_NE(log.find("zh-tiny-qwen3: every cell finished earlier, skipped"), std::string::npos) << log;
  EXPECT_EQ(log.find("loading " + base), std::string::npos) << log;
  EXPECT_NE(log.find("q8_0 on zh1: finished earlier"), std::string::npos) << log;

  const auto rows = read_csv((dir / "out" / "eval.csv").string());
  ASSERT_EQ(rows.size(), 9u);
  const auto& head = rows[0];
  auto col = [&](const std::string& name) { return size_t(std::find(head.begin(), head.end(), name) - head.begin()); };
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const std::string model = r[0] == "zh-tiny-qwen3" ? base : (dir / (r[0] + ".gguf")).string();
    const std::string text = (dir / (r[1] + ".txt")).string();
    const bool is_base = r[0] == "zh-tiny-qwen3";
    std::string out;
    ASSERT_EQ(test::run_bonsai("perplexity -m " + model + " -f " + text + " --ctx 64 --json " +
                                   (is_base ? std::string("--chunks 3")
                                            : "--kl-base " + (dir / "out" / "kld" / (r[1] + ".kld")).string()),
                               &out), 0)
        << out;
    const auto j = nlohmann::json::parse(out.substr(out.find('{')));
    EXPECT_EQ(std::stod(r[col("ppl")]), j["ppl"].get<double>()) << r[0] << "@" << r[1];
    EXPECT_EQ(std::stod(r[col("ppl_err")]), j["ppl_err"].get<double>()) << r[0] << "@" << r[1];
    if (is_base) {
      EXPECT_EQ(r[col("kld_mean")], "");
      continue;
    }
    EXPECT_EQ(std::stod(r[col("kld_mean")]), j["kld"]["mean"].get<double>()) << r[0] << "@" << r[1];
    EXPECT_EQ(std::stod(r[col("delta_ln_ppl")]), j["paired"]["delta_ln_ppl"].get<double>()) << r[0] << "@" << r[1];
    EXPECT_EQ(std::stod(r[col("delta_ln_ppl_err")]), j["paired"]["delta_ln_ppl_err"].get<double>());
    EXPECT_EQ(j["kld"]["positions"], 2 * 31);
    EXPECT_EQ(j["paired"]["positions"], 3 * 31);
  }
}
