// `bonsai sweep`: quantize a model with several plans from ONE statistics file (measured by the
// first plan that needs it, or loaded; every later plan reuses it with no calibration forward),
// then measure each result's perplexity on evaluation text and its KL divergence against the
// unquantized model's saved distributions. Each finished row is its own JSON file in the output
// folder, written atomically, so an interrupted sweep resumes: rows whose file exists are
// skipped. The table (CSV, JSON) and the Pareto plot (SVG) are rewritten from every finished row.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plot/svg.h"
#include "quantize/ternary.h"

namespace bonsai::mixed {

struct SweepRow {
  std::string name;        // the plan's name; "bf16" and "q8_0" for the references
  std::string kind;        // "plan" or "reference"
  std::string plan;        // the plan argument (file or preset); "" for bf16
  uint64_t tensor_bytes = 0, file_bytes = 0;
  uint64_t block_linear_bytes = 0;
  int64_t block_linear_elems = 0;
  double bpw_block = 0;  // bits per weight over the block linear weights (the quantized matrices)
  double ppl = 0, ppl_err = 0;
  int64_t chunks = 0, tokens_scored = 0;
  std::optional<double> kld_mean, kld_err, kld_p99, top1;
  // Against the BF16 row on the same tokens: mean ln(PPL/PPL(bf16)) and its paired standard error
  // (absent in rows measured before the sweep recorded it).
  std::optional<double> dlnppl, dlnppl_err;
  std::string statistics;  // "calibrated", "loaded", "not needed"
  double quantize_s = 0, eval_s = 0;
};

nlohmann::ordered_json to_json(const SweepRow& r);
SweepRow sweep_row_from_json(const nlohmann::json& j, const std::string& source);

// The file a finished row lives in: DIR/NAME.row.json.
std::string row_path(const std::string& dir, const std::string& name);
// The finished row of `name` in `dir`, or nullopt; a row file that cannot be read is an Error
// naming it (delete it to measure again).
std::optional<SweepRow> finished_row(const std::string& dir, const std::string& name);
void save_row(const std::string& dir, const SweepRow& r);

std::string rows_csv(const std::vector<SweepRow>& rows);
// Perplexity against bits/weight over the block linear weights: the plans as points (labelled),
// their Pareto front as a line, BF16 and Q8_0 (rows of kind "reference") as horizontal lines.
plot::XYChart pareto_chart(const std::vector<SweepRow>& rows, const std::string& title);
// Indices of the rows on the lower-left front (no other row both smaller and better).
std::vector<size_t> pareto_front(const std::vector<SweepRow>& rows);

// What one invocation runs. `all` is the sweep on one machine. A job array splits it in three
// jobs: `prepare` makes what every task shares (the BF16 row and its distributions, the KLD base;
// the statistics file, measured by the first plan that needs it, as `all` does), then each `task`
// runs one row of sweep_tasks() and nothing shared, then `all` finds every row finished and only
// rewrites the table and the plot. Only `all` writes sweep.csv, sweep.json and pareto.svg.
enum class SweepStep { all, prepare, task };

struct SweepOptions {
  std::string model, eval_text, out_dir;
  std::vector<std::string> plans;  // files or preset names
  std::string stats;               // default: OUT/stats.gguf
  std::optional<quant::Method> method;
  // The KLD base keeps every token (kl_top_k 0, exact) for the first kl_chunks chunks (~1.5 GB at
  // 20 chunks and a 152k vocabulary); perplexity and its paired difference cover every chunk.
  int64_t ctx = 512, chunks = -1, kl_top_k = 0, kl_chunks = 20;
  bool q8_reference = true;
  std::vector<std::string> calib_files;
  int64_t calib_windows = 128, calib_len = 512;
  uint64_t seed = 0;
  std::string device = "cpu";
  int threads = 0;
  SweepStep step = SweepStep::all;
  int64_t task_index = -1;  // step `task`: which of sweep_tasks(), from 0
};

// A row the sweep runs after the BF16 base: a plan (kind "plan") or the Q8_0 reference.
struct SweepTask {
  std::string name, kind, plan;
};
// The rows a job array's tasks run, in task-index order: the plans as given, then Q8_0 (when
// q8_reference). Reads the plans (names must be distinct), not the model; writes nothing.
std::vector<SweepTask> sweep_tasks(const SweepOptions& o);

struct SweepEvents {
  std::function<void(const std::string&)> info;
};

// Runs the unfinished rows of o.step (BF16 base first: its distributions are the KLD base; then
// the plans; then Q8_0) and returns its rows, finished earlier or now, in that order: every row for
// `all`; BF16 and the row that measured the statistics (if any) for `prepare`; BF16 and the task's
// row for `task`. A task refuses to start (Error naming the file) when a file `prepare` makes is
// missing: it never measures a shared file that concurrent tasks would race to write.
std::vector<SweepRow> run_sweep(const SweepOptions& o, const SweepEvents& ev = {});

}  // namespace bonsai::mixed
