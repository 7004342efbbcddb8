// bonsai eval's bookkeeping (eval/eval.h): short names, and a finished cell measured with other
// settings refused by name rather than mixed into the table.
#include <gtest/gtest.h>

#include <filesystem>

#include "datasets/choice_tasks.h"
#include "eval/eval.h"
#include "formats/text_file.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::eval;
namespace fs = std::filesystem;

TEST(Eval, ShortNamesAreFileNamesMadeUnique) {
  EXPECT_EQ(short_names({"a/q8_0.gguf", "zh-tiny-qwen3/", "b/q8_0.gguf", "c/q8_0.bonsai", "x.txt"}),
            (std::vector<std::string>{"q8_0", "zh-tiny-qwen3", "q8_0-2", "q8_0-3", "x"}));
}

TEST(Eval, CellsOfOtherSettingsAreNamedErrors) {
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const auto dir = test::scratch_dir();
  const std::string text = test::shared_file("corpora/en/tinystories_validation_100.txt").string();
  EvalOptions o;
  o.models = {test::shared_file("models/stories260K/stories260K.gguf").string()};
  o.texts = {text};
  o.out_dir = (dir / "out").string();
  o.ctx = 64;
  o.chunks = 2;
  const auto cells = run_eval(o);
  ASSERT_EQ(cells.size(), 1u);
  EXPECT_EQ(cells[0]["chunks"], 2);
  EXPECT_FALSE(cells[0].contains("kld"));
  const std::string cell = (dir / "out" / "cells" / "stories260K@tinystories_validation_100.json").string();
  ASSERT_TRUE(fs::exists(cell));
  EXPECT_TRUE(fs::exists(dir / "out" / "eval.svg"));
  o.chunks = 3;
  EXPECT_NE(test::expect_error([&] { run_eval(o); }, cell).find("other settings"), std::string::npos);
  write_text_file(cell, "{\"model\":");
  o.chunks = 2;
  test::expect_error([&] { run_eval(o); }, cell);
}

TEST(Eval, TaskColumnsScoreAsThePerplexityCommand) {
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const auto dir = test::scratch_dir();
  std::vector<datasets::ChoiceTask> tasks = {
      {"Once upon a time, there was a little girl named Lily. She liked to", {"play with her toys.", "zq xv kk qpz."}, 0},
      {"Tom had a big red ball. He", {"qq zzkx vvj.", "liked to play with it."}, 1}};
  write_text_file((dir / "mc.bin").string(), datasets::serialize_choice_tasks(tasks));
  EvalOptions o;
  o.models = {test::shared_file("models/stories260K/stories260K.gguf").string()};
  o.tasks = {"multiple-choice:" + (dir / "mc.bin").string()};
  o.out_dir = (dir / "out").string();
  const auto cells = run_eval(o);
  ASSERT_EQ(cells.size(), 1u);
  EXPECT_EQ(cells[0]["task"], "multiple-choice");
  EXPECT_EQ(cells[0]["tasks"], 2);
  EXPECT_EQ(cells[0]["correct"], 2);
  EXPECT_NE(read_text_file((dir / "out" / "eval.csv").string()).find(",multiple-choice,1.0,0.0"), std::string::npos);
  o.tasks = {"choices:" + (dir / "mc.bin").string()};
  EXPECT_NE(test::error_of([&] { run_eval(o); }).find("KIND:FILE"), std::string::npos);
}
