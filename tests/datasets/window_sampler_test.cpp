// Calibration windows: deterministic, from calibration text only (datasets/window_sampler.h).
#include "datasets/window_sampler.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <set>

#include "formats/error.h"
#include "runtime/load.h"
#include "runtime/tokenizer.h"
#include "support.h"

namespace bonsai::datasets {
namespace {

constexpr const char* kTokenizer = "tokenizers/qwen3/qwen3-vocab.gguf";

const Tokenizer& qwen3() {
  static const auto tok = load_tokenizer(test::shared_file(kTokenizer).string());
  return *tok;
}

void write(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

TEST(WindowSampler, EngineIsTheStandardOne) {
  // The standard fixes mt19937_64's output: the 10000th value from the default seed. The rule
  // in window_sampler.h rests on this being the same on every platform.
  std::mt19937_64 e;
  e.discard(9999);
  EXPECT_EQ(e(), 9981545732273789042ull);
}

TEST(WindowSampler, StartsAreInRangeAndFollowTheSeed) {
  const auto a = draw_window_starts(1000, 100, 500, 7);
  ASSERT_EQ(a.size(), 500u);
  for (uint64_t s : a) EXPECT_LE(s, 900u);
  EXPECT_EQ(a, draw_window_starts(1000, 100, 500, 7));
  EXPECT_NE(a, draw_window_starts(1000, 100, 500, 8));
  // Every start is reachable, including both ends: 901 possible starts, 20000 draws.
  const auto many = draw_window_starts(1000, 100, 20000, 1);
  const std::set<uint64_t> distinct(many.begin(), many.end());
  EXPECT_EQ(distinct.size(), 901u);
  // A single possible start, and a stream exactly one window long.
  EXPECT_EQ(draw_window_starts(64, 64, 3, 5), (std::vector<uint64_t>{0, 0, 0}));
  EXPECT_THROW(draw_window_starts(10, 11, 1, 0), Error);
  EXPECT_THROW(draw_window_starts(10, 0, 1, 0), Error);
  EXPECT_TRUE(draw_window_starts(10, 5, 0, 0).empty());
}

TEST(WindowSampler, WindowsAreSlicesOfTheConcatenatedFiles) {
  BONSAI_REQUIRE_SHARED(kTokenizer);
  const auto dir = test::scratch_dir();
  const std::string a = "桂华秋皎洁，兰叶春葳蕤。欣欣此生意，自尔为佳节。谁知林栖者，闻风坐相悦。\n";
  const std::string b = "ls 列出目录内容。默认为当前目录，按字母顺序排序。\n";
  write(dir / "calib-a.txt", a);
  write(dir / "calib-b.txt", b);
  const std::vector<std::string> files = {(dir / "calib-a.txt").string(), (dir / "calib-b.txt").string()};

  auto stream = qwen3().encode(a, false, false);
  const auto ids_b = qwen3().encode(b, false, false);
  stream.insert(stream.end(), ids_b.begin(), ids_b.end());

  const auto w = sample_windows(qwen3(), files, 6, 8, 42);
  EXPECT_EQ(w.total_tokens, stream.size());
  EXPECT_EQ(w.starts, draw_window_starts(stream.size(), 8, 6, 42));
  ASSERT_EQ(w.size(), 6u);
  ASSERT_EQ(w.ids.size(), 6u * 8u);
  for (size_t k = 0; k < w.size(); ++k) {
    const std::vector<int32_t> expect(stream.begin() + long(w.starts[k]), stream.begin() + long(w.starts[k] + 8));
    EXPECT_EQ(std::vector<int32_t>(w.window(k).begin(), w.window(k).end()), expect) << "window " << k;
  }
  // Same seed, same windows; another seed, other windows.
  EXPECT_EQ(sample_windows(qwen3(), files, 6, 8, 42).ids, w.ids);
  EXPECT_NE(sample_windows(qwen3(), files, 6, 8, 43).starts, w.starts);
  // BOS over each window's first id, the rest untouched.
  auto with_bos = w;
  with_bos.begin_each_with(-7);
  for (size_t i = 0; i < w.ids.size(); ++i) EXPECT_EQ(with_bos.ids[i], i % 8 == 0 ? -7 : w.ids[i]) << i;
  // Too little text for one window: the error names the files and both counts.
  try {
    sample_windows(qwen3(), files, 1, stream.size() + 1, 0);
    ADD_FAILURE() << "a window longer than the text was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(files[0]), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(stream.size()) + " tokens"), std::string::npos) << m;
  }
}

TEST(WindowSampler, EvaluationTextIsRefused) {
  BONSAI_REQUIRE_SHARED(kTokenizer);
  const auto dir = test::scratch_dir();
  write(dir / "calib-ok.txt", "校准文字。\n");
  write(dir / "eval-debian-handbook-zh-CN.txt", "评估文字。\n");
  write(dir / "handbook.txt", "评估文字。\n");
  write(dir / "MANIFEST.json",
        R"j({"files": {"handbook.txt": {"role": "evaluation (held out)"}, "calib-ok.txt": {"role": "calibration"}}})j");
  const std::string ok = (dir / "calib-ok.txt").string();
  EXPECT_NO_THROW(sample_windows(qwen3(), {ok}, 1, 2, 0));
  for (const char* name : {"eval-debian-handbook-zh-CN.txt", "handbook.txt"}) {
    const std::string bad = (dir / name).string();
    try {
      sample_windows(qwen3(), {ok, bad}, 1, 2, 0);
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("evaluation"), std::string::npos) << e.what();
    }
  }
  // The published evaluation files are refused too (by name and by their manifest).
  if (test::have_shared("corpora/zh/eval-debian-handbook-zh-CN.txt")) {
    EXPECT_THROW(require_calibration_file(test::shared_file("corpora/zh/eval-debian-handbook-zh-CN.txt").string()),
                 Error);
  }
  EXPECT_THROW(sample_windows(qwen3(), {(dir / "missing.txt").string()}, 1, 1, 0), Error);
  EXPECT_THROW(sample_windows(qwen3(), {}, 1, 1, 0), Error);
  // A manifest that cannot be read is an error, not a silent pass.
  write(dir / "MANIFEST.json", "{not json");
  EXPECT_THROW(require_calibration_file(ok), Error);
}

}  // namespace
}  // namespace bonsai::datasets
