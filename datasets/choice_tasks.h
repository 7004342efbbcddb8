// A Chinese multiple-choice set built from held-out text only: each task is a passage (the
// sentences of a paragraph up to some point) with four candidate next sentences, the true one
// and three drawn from other paragraphs of the same document with a similar length. A model
// that follows the text gives the true sentence the highest likelihood; one that has lost it
// guesses (25%). Written in llama-perplexity's --multiple-choice file format, so the same file
// scores with llama.cpp, plus a manifest (source checksum, rules, seed, counts, output checksum).
//
// Deterministic: the same text, seed and options give the same bytes (std::mt19937_64 draws
// reduced by modulo, no library distribution whose output may change between versions). A
// paragraph that shares a window of kOverlapWindow characters with the calibration text is
// never used, neither as passage nor as distractor.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bonsai::datasets {

struct ChoiceTask {
  std::string question;              // the passage
  std::vector<std::string> answers;  // four candidate next sentences
  int correct = 0;                   // index of the true one
};

struct ChoiceOptions {
  int64_t tasks = 500;
  uint64_t seed = 0;
  int64_t context_min = 20, context_max = 300;  // passage length in characters (whole sentences)
  int64_t answer_min = 10, answer_max = 100;    // candidate length in characters
  int choices = 4;
};

struct ChoiceSet {
  std::vector<ChoiceTask> tasks;
  size_t paragraphs = 0, overlapping = 0, candidates = 0;  // what the builder saw and dropped
};

// The tasks from `eval_text` (one paragraph per line) that never touch `calib_files`' text.
// Error naming the file when eval_text is one of calib_files or fewer tasks than asked exist.
ChoiceSet build_choice_tasks(const std::string& eval_text, const std::vector<std::string>& calib_files,
                             const ChoiceOptions& o);

// llama-perplexity's --multiple-choice layout: uint32 task count, uint32 offset of each task,
// then each task: question (uint32 length + bytes), the single-answer set (uint32 count, the
// strings, int32 labels: 1 for the true one), the multiple-answer set (empty here).
std::string serialize_choice_tasks(const std::vector<ChoiceTask>& tasks);
// Reads that layout (Error naming `source` on anything malformed): the single-answer sets, each
// with exactly one label 1.
std::vector<ChoiceTask> parse_choice_tasks(const std::string& bytes, const std::string& source);

}  // namespace bonsai::datasets
