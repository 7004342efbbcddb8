// Crash-safe quantization jobs and determinism on zh-tiny (6 blocks of 256-wide matrices), the
// smallest model whose plan needs calibration, with 4 windows of 64 tokens: a job killed during
// calibration, between blocks and in the final write resumes to the uninterrupted run's bytes,
// statistics saved with --stats included; --threads 1 and 2 write identical GGUF and .bonsai
// files. Each run is a few CPU-seconds, hence the slow label (job_test.cpp holds the fast ones).
#include <gtest/gtest.h>

#include <fstream>

#include "job_support.h"

using namespace bonsai;
namespace fs = std::filesystem;

namespace {

const char* kTiny = "models/zh-tiny-qwen3";
const char* kCalib = "corpora/zh/calib-fortunes-zh.txt";

// The first ~24 KB of a calibration file, cut at a line end: 4 windows of 64 tokens need no more,
// and tokenizing it takes milliseconds.
std::string small_calib(const fs::path& dir) {
  std::ifstream in(test::shared_file(kCalib), std::ios::binary);
  std::string text(24 << 10, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(text.rfind('\n') + 1);
  const fs::path p = dir / "calib-small.txt";
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

// `method` optimal calibrates (E[x²]) without gptq's cost; gptq adds Gram matrices and Eigen's
// products, where thread counts could matter.
std::string tiny_args(const fs::path& out, const std::string& calib, const std::string& method, int threads) {
  return "quantize -m " + test::shared_file(kTiny).string() + " -o " + out.string() + " --calib " + calib +
         " --calib-windows 4 --calib-len 64 --method " + method + " --seed 3 --threads " + std::to_string(threads);
}

}  // namespace

TEST(CrashSafeJob, KilledDuringCalibrationResumesToTheSameBytes) {
  BONSAI_REQUIRE_SHARED(kTiny);
  BONSAI_REQUIRE_SHARED(kCalib);
  const auto dir = test::scratch_dir();
  const std::string calib = small_calib(dir);
  const fs::path out = dir / "out.gguf";
  const std::string args = tiny_args(out, calib, "optimal", 1);
  std::string log;
  ASSERT_EQ(test::run_bonsai(args, &log), 0) << log;
  const std::vector<uint8_t> want = test::read_bytes(out);
  fs::remove(out);
  // 4 windows per block: the 10th window to enter a block is block 2's second; blocks 0 and 1 are done.
  test::kill_and_resume(args, out, "calibrate:10", want);
}

TEST(CrashSafeJob, StatisticsSavedAtTheEndSurviveKillsBetweenBlocksAndInTheFinalWrite) {
  BONSAI_REQUIRE_SHARED(kTiny);
  BONSAI_REQUIRE_SHARED(kCalib);
  const auto dir = test::scratch_dir();
  const std::string calib = small_calib(dir);
  const fs::path out = dir / "out.gguf", stats = dir / "stats.gguf";
  const std::string args = tiny_args(out, calib, "optimal", 1) + " --stats " + stats.string();
  std::string log;
  ASSERT_EQ(test::run_bonsai(args, &log), 0) << log;
  const std::vector<uint8_t> want = test::read_bytes(out), want_stats = test::read_bytes(stats);
  fs::remove(out);
  fs::remove(stats);
  // After block 3's checkpoint: blocks 0-3's statistics come back from the checkpoint.
  test::kill_and_resume(args, out, "block:4", want);
  EXPECT_TRUE(test::read_bytes(stats) == want_stats) << "the statistics saved by the resumed job differ";
  fs::remove(stats);
  // In the final write, after the statistics were saved: that file is the job's own output, not
  // statistics to reuse, and the resumed job writes the same output and statistics.
  test::kill_and_resume(args, out, "write:out.gguf:2", want);
  EXPECT_TRUE(test::read_bytes(stats) == want_stats);
}

TEST(Determinism, ThreadCountDoesNotChangeTheGguf) {
  BONSAI_REQUIRE_SHARED(kTiny);
  BONSAI_REQUIRE_SHARED(kCalib);
  const auto dir = test::scratch_dir();
  const std::string calib = small_calib(dir);
  std::string log;
  ASSERT_EQ(test::run_bonsai(tiny_args(dir / "t1.gguf", calib, "gptq", 1), &log), 0) << log;
  ASSERT_EQ(test::run_bonsai(tiny_args(dir / "t2.gguf", calib, "gptq", 2), &log), 0) << log;
  EXPECT_TRUE(test::read_bytes(dir / "t1.gguf") == test::read_bytes(dir / "t2.gguf"));
}

TEST(Determinism, ThreadCountDoesNotChangeTheBonsaiFile) {
  BONSAI_REQUIRE_SHARED(kTiny);
  BONSAI_REQUIRE_SHARED(kCalib);
  const auto dir = test::scratch_dir();
  const std::string calib = small_calib(dir);
  const test::ScopedEnv date("SOURCE_DATE_EPOCH", "1700000000");
  std::string log;
  // .bonsai also stores every weight's output error (bonsai.quant.layer_errors): sums over
  // 128-column panels, which must not depend on how threads share them.
  ASSERT_EQ(test::run_bonsai(tiny_args(dir / "t1.bonsai", calib, "gptq", 1), &log), 0) << log;
  ASSERT_EQ(test::run_bonsai(tiny_args(dir / "t2.bonsai", calib, "gptq", 2), &log), 0) << log;
  EXPECT_TRUE(test::read_bytes(dir / "t1.bonsai") == test::read_bytes(dir / "t2.bonsai"));
}
