// `bonsai eval`: every model x text in one job. Each model is loaded once and measured on every
// text by the perplexity code (runtime/kld.h's perplexity_kld, as `bonsai perplexity`); with a
// base model, the base runs first on every text and saves its distributions (DIR/kld/TEXT.kld),
// and every other cell reports its KLD and paired difference against them. Each finished cell
// is its own JSON file (DIR/cells/MODEL@TEXT.json, written atomically), so a killed job resumes
// where it stopped: a cell whose file exists, measured with the same settings, is skipped, and a
// model whose cells are all finished is not even loaded. eval.csv, eval.json and eval.svg (the
// texts' perplexities; none without texts) are rewritten from all cells at the end.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bonsai::eval {

struct EvalOptions {
  std::vector<std::string> models, texts;
  std::string kl_base_model;  // empty: no KLD; else measured first (and listed first)
  std::string out_dir;
  int64_t ctx = 512, chunks = -1;
  // The base's layout (runtime/kld.h): every token in 16 bits for the first kl_chunks chunks.
  int64_t kl_top_k = 0, kl_chunks = 20;
  // Task columns beside the texts: "multiple-choice:FILE", "hellaswag:FILE", "winogrande:FILE"
  // (eval/tasks.h), each model's accuracy; the first task_limit tasks of each (-1: all).
  std::vector<std::string> tasks;
  int64_t task_limit = -1;
  std::string device = "cpu";
  int threads = 0;
};

// The short names cells and columns use: file or folder names without their extension, made
// unique by a suffix (-2, -3, ...) in the order given.
std::vector<std::string> short_names(const std::vector<std::string>& paths);

struct EvalEvents {
  std::function<void(const std::string&)> info;
  // Chunks measured so far of all chunks the unfinished cells measure (an estimate from the
  // first tokenization of each text), after every chunk.
  std::function<void(int64_t done, int64_t total, const std::string& note)> progress;
};

// One cell: {"model", "model_path", "text", "text_path", "settings", perplexity_json's fields,
// "kld"/"paired" against the base (absent for the base itself and without one)}; a task cell
// {"model", "model_path", "text", "text_path", "task", "settings", "tasks", "correct", "accuracy",
// "accuracy_err", "chance", "seconds"}.
using Cell = nlohmann::ordered_json;

// Runs the unfinished cells and returns every cell, base first, in model x text order.
std::vector<Cell> run_eval(const EvalOptions& o, const EvalEvents& ev = {});

// The table of the cells: one row per cell (model, text, ppl, ppl_err, tokens_scored, chunks,
// seconds, KLD and paired columns, task, accuracy, accuracy_err; empty where a cell has none);
// numbers written as the cells' JSON writes them, so they read back to the same doubles.
std::string cells_csv(const std::vector<Cell>& cells);

}  // namespace bonsai::eval
