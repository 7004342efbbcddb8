// The multiple-choice builder (datasets/choice_tasks.h): the same bytes twice, never a paragraph
// that shares a window with the calibration text, the true sentence among the choices and the
// distractors from other paragraphs; calibration text refused; the file format round-trips and
// damaged files are named errors.
#include <gtest/gtest.h>

#include <set>

#include "datasets/choice_tasks.h"
#include "datasets/overlap.h"
#include "formats/error.h"
#include "formats/text_file.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::datasets;

namespace {

// 60 paragraphs of three sentences each, distinct characters per paragraph; paragraph 7 copies a
// calibration line.
std::string held_out_text(const std::string& calib_line) {
  std::string t;
  for (int p = 0; p < 60; ++p) {
    if (p == 7) {
      t += calib_line + "\n";
      continue;
    }
    for (int s = 0; s < 3; ++s) {
      t += "第" + std::to_string(p) + "段第" + std::to_string(s) + "句，这里写着一些用于测试的中文内容";
      t += std::string(size_t(s + 1), 'x') + "。";
    }
    t += "\n";
  }
  return t;
}

}  // namespace

TEST(ChoiceTasks, DeterministicHeldOutAndWellFormed) {
  const auto dir = test::scratch_dir();
  const std::string calib_line = "校准文本中的一段话，它绝不能出现在任务里面，无论是作为段落还是作为干扰项。第二句话也在这里。";
  write_text_file((dir / "calib.txt").string(), calib_line + "\n");
  write_text_file((dir / "eval.txt").string(), held_out_text(calib_line));
  ChoiceOptions o;
  o.tasks = 30;
  const ChoiceSet a = build_choice_tasks((dir / "eval.txt").string(), {(dir / "calib.txt").string()}, o);
  const ChoiceSet b = build_choice_tasks((dir / "eval.txt").string(), {(dir / "calib.txt").string()}, o);
  EXPECT_EQ(serialize_choice_tasks(a.tasks), serialize_choice_tasks(b.tasks));
  o.seed = 1;
  EXPECT_NE(serialize_choice_tasks(build_choice_tasks((dir / "eval.txt").string(), {(dir / "calib.txt").string()}, o).tasks),
            serialize_choice_tasks(a.tasks));
  EXPECT_EQ(a.overlapping, 1u);
  ASSERT_EQ(a.tasks.size(), 30u);
  OverlapIndex calib;
  calib.add(calib_line);
  std::set<int> positions;
  for (const ChoiceTask& t : a.tasks) {
    ASSERT_EQ(t.answers.size(), 4u);
    positions.insert(t.correct);
    EXPECT_FALSE(calib.find(t.question)) << t.question;
    // The true sentence continues the passage's paragraph: "第P段" of the passage's last sentence.
    const std::string para = t.question.substr(0, t.question.find("段") + 3);
    EXPECT_EQ(t.answers[size_t(t.correct)].rfind(para, 0), 0u) << t.question << " | " << t.answers[size_t(t.correct)];
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_FALSE(calib.find(t.answers[i]));
      if (int(i) != t.correct) {
        EXPECT_NE(t.answers[i].rfind(para, 0), 0u) << "a distractor from the same paragraph";
      }
    }
  }
  EXPECT_GT(positions.size(), 2u);  // the true answer is not always in the same place
}

TEST(ChoiceTasks, RefusesCalibrationTextAndTooFewTasks) {
  const auto dir = test::scratch_dir();
  write_text_file((dir / "eval.txt").string(), held_out_text("无关"));
  ChoiceOptions o;
  test::expect_error([&] { build_choice_tasks((dir / "eval.txt").string(), {(dir / "eval.txt").string()}, o); },
                     (dir / "eval.txt").string());
  o.tasks = 1000;
  EXPECT_NE(test::expect_error([&] { build_choice_tasks((dir / "eval.txt").string(), {}, o); }, (dir / "eval.txt").string())
                .find("asked for 1000"),
            std::string::npos);
}

TEST(ChoiceTasks, FileRoundTripsAndDamagedFilesAreNamed) {
  std::vector<ChoiceTask> tasks(2);
  tasks[0] = {"问题一", {"甲", "乙", "丙"}, 2};
  tasks[1] = {"question two", {"a", "b"}, 0};
  const std::string bytes = serialize_choice_tasks(tasks);
  const auto back = parse_choice_tasks(bytes, "t.bin");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].question, "问题一");
  EXPECT_EQ(back[0].answers, tasks[0].answers);
  EXPECT_EQ(back[0].correct, 2);
  EXPECT_EQ(back[1].correct, 0);
  for (size_t cut = 0; cut < bytes.size(); ++cut)
    EXPECT_NE(test::error_of([&] { parse_choice_tasks(bytes.substr(0, cut), "t.bin"); }).find("t.bin"), std::string::npos)
        << cut;
  std::string two_right = bytes;
  two_right[two_right.size() - 8] = 1;  // task 1's first label too (labels: 1 0, then mc2's count)
  EXPECT_NE(test::error_of([&] { parse_choice_tasks(two_right, "t.bin"); }).find("labelled right"), std::string::npos);
}
