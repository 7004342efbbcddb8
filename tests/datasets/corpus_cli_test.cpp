// bonsai corpus check: exit status and report (the build subcommand needs apt: docs/corpus.md).
#include <gtest/gtest.h>

#include <fstream>

#include "support.h"

namespace bonsai {
namespace {

void write(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

TEST(CorpusCli, CheckFindsOverlapAndSaysWhere) {
  const auto dir = test::scratch_dir();
  const std::string window = "这是一段足够长的评估文字，其中任何连续三十个字符都构成一个检查窗口。";
  write(dir / "eval.txt", window + "\n");
  write(dir / "clean.txt", "完全不同的校准段落。\n");
  write(dir / "leak.txt", "第一行没有问题。\n前缀" + window + "\n");
  std::string out;
  EXPECT_EQ(
      test::run_bonsai(
          "corpus check --calib " + (dir / "clean.txt").string() + " --eval " + (dir / "eval.txt").string(), &out),
      0)
      << out;
  EXPECT_NE(out.find("overlapping calibration paragraphs: 0"), std::string::npos) << out;
  EXPECT_EQ(test::run_bonsai("corpus check --calib " + (dir / "clean.txt").string() + " " +
                                 (dir / "leak.txt").string() + " --eval " + (dir / "eval.txt").string(),
                             &out),
            1)
      << out;
  EXPECT_NE(out.find("overlapping calibration paragraphs: 1"), std::string::npos) << out;
  EXPECT_NE(out.find((dir / "leak.txt").string() + ":2"), std::string::npos) << out;
  EXPECT_EQ(test::run_bonsai(
                "corpus check --json --calib " + (dir / "leak.txt").string() + " --eval " + (dir / "eval.txt").string(),
                &out),
            1);
  EXPECT_NE(out.find("\"calib_line\":2"), std::string::npos) << out;
}

TEST(CorpusCli, UsageErrors) {
  std::string out;
  EXPECT_EQ(test::run_bonsai("corpus", &out), 2);
  EXPECT_EQ(test::run_bonsai("corpus frobnicate", &out), 2);
  EXPECT_EQ(test::run_bonsai("corpus check --calib a.txt", &out), 2) << out;  // --eval is required
  EXPECT_EQ(test::run_bonsai("corpus check --calib /nonexistent/a.txt --eval /nonexistent/b.txt", &out), 1);
  EXPECT_NE(out.find("/nonexistent/b.txt"), std::string::npos) << out;
  EXPECT_EQ(test::run_bonsai("corpus build --help", &out), 0);
  EXPECT_NE(out.find("--work"), std::string::npos) << out;
}

}  // namespace
}  // namespace bonsai
