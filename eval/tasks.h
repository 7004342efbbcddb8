// Task accuracy the way llama-perplexity scores it (--hellaswag, --winogrande,
// --multiple-choice), on the files its tools read, so existing task files and figures compare.
// A choice's score is the mean log-probability of its tokens after what the choices share:
// - multiple choice and HellaSwag: each answer as question + " " + answer, scored over the tokens
//   after the prefix common to all answers; the highest mean wins (the first on a tie);
// - Winogrande: first + choice + second (the sentence split at "_"), scored over the tokens of
//   `second` (when both choices leave more than 3 such tokens; else after the common prefix),
//   the last token excluded when more than one remains; a tie goes to the second choice.
// Accuracy ± sqrt(p (1 - p) / (n - 1)), as llama-perplexity prints it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "datasets/choice_tasks.h"
#include "runtime/backend.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

namespace bonsai::eval {

using datasets::ChoiceTask;

struct WinograndeTask {
  std::string first, second;    // the sentence before and after "_"
  std::string choices[2];
  int answer = 0;               // 0 or 1
};

// HellaSwag's text file: 6 lines a task (context, the right ending's index, four endings).
std::vector<ChoiceTask> parse_hellaswag(const std::string& text, const std::string& source);
// Winogrande's CSV: index,sentence,option1,option2,answer (1 or 2); the sentence may be quoted; a
// line that is not a task (a header) is skipped, and so counted.
std::vector<WinograndeTask> parse_winogrande(const std::string& text, const std::string& source, int64_t* skipped = nullptr);

struct TaskScore {
  int64_t tasks = 0, correct = 0;
  double accuracy = 0, accuracy_err = 0;  // shares (0..1)
  double chance = 0;                      // expected accuracy of guessing
  double seconds = 0;
  std::vector<std::vector<double>> scores;  // per task, each choice's mean log-probability
  std::vector<int> chosen;                  // per task, the choice taken
};
using TaskProgress = std::function<void(int64_t done, int64_t total)>;

TaskScore score_choices(const Model& model, Backend& backend, const Tokenizer& tok, const std::vector<ChoiceTask>& tasks,
                        const TaskProgress& progress = {});
TaskScore score_winogrande(const Model& model, Backend& backend, const Tokenizer& tok,
                           const std::vector<WinograndeTask>& tasks, const TaskProgress& progress = {});

}  // namespace bonsai::eval
