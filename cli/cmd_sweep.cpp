// bonsai sweep -m MODEL --plans P... --eval TEXT -o DIR: quantize with each plan from one
// statistics file, measure perplexity and KLD, write CSV/JSON/Pareto SVG (mixed/sweep.h).
#include <cstdio>

#include "cli/command.h"
#include "cli/json_out.h"
#include "mixed/sweep.h"
#include "quantize/pipeline.h"

namespace bonsai::cli {
namespace {

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  add_model(opts);
  mixed::SweepOptions so;
  opts.add_options()("plans", po::value<std::vector<std::string>>(&so.plans)->multitoken()->required(),
                     "plan files or preset names, one row each (named by the plan)")(
      "eval", po::value<std::string>(&so.eval_text)->required(), "evaluation text (perplexity, KLD)")(
      "output,o", po::value<std::string>(&so.out_dir)->required(), "output folder (rows already there are skipped)")(
      "stats", po::value<std::string>(&so.stats),
      "statistics file: loaded when present, else measured by the first plan and saved (default: DIR/stats.gguf)")(
      "method", po::value<std::string>(), "method for ternary tensors (default: the plans', else quantize's)")(
      "ctx,c", po::value<int64_t>(&so.ctx)->default_value(so.ctx), "perplexity context")(
      "chunks", po::value<int64_t>(&so.chunks)->default_value(so.chunks), "perplexity chunks (-1: the whole text)")(
      "kl-top-k", po::value<int64_t>(&so.kl_top_k)->default_value(so.kl_top_k),
      "KLD base layout: 0 keeps every token in 16 bits (exact), K > 0 the top K (a lower bound)")(
      "kl-chunks", po::value<int64_t>(&so.kl_chunks)->default_value(so.kl_chunks),
      "chunks whose distributions the KLD base keeps (-1: all; perplexity covers every chunk)")(
      "no-q8-reference", po::bool_switch(), "skip the Q8_0 reference row")(
      "calib", po::value<std::vector<std::string>>(&so.calib_files)->multitoken(), "calibration text (when measuring)")(
      "calib-windows", po::value<int64_t>(&so.calib_windows)->default_value(so.calib_windows), "calibration windows")(
      "calib-len", po::value<int64_t>(&so.calib_len)->default_value(so.calib_len), "tokens per calibration window")(
      "seed", po::value<uint64_t>(&so.seed)->default_value(so.seed), "calibration window seed")(
      "prepare", po::bool_switch(),
      "job array, first job: make what the tasks share (BF16 row and distributions, statistics), then stop")(
      "task-index", po::value<int64_t>(&so.task_index),
      "job array task: run only this row (0-based, as --list-tasks numbers them; $SLURM_ARRAY_TASK_ID)")(
      "list-tasks", po::bool_switch(), "print the job array's tasks (index, row, plan), one a line; run nothing");
  add_threads(opts);
  add_device(opts);
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai sweep -m MODEL --plans P1.yaml P2.yaml ... --eval TEXT [--stats STATS] -o DIR",
             "Rows: BF16 (the model as stored; its distributions are saved as the KLD base), one per\n"
             "plan, and Q8_0 (every matrix Q8_0). Every plan is quantized from ONE statistics file:\n"
             "loaded when --stats exists, else measured by the first plan that needs it and reused by\n"
             "the rest (the log says which, per row). Each row: perplexity on --eval (llama-perplexity's\n"
             "method), KLD against BF16, bits/weight over the block linear weights, sizes, times.\n"
             "Writes DIR/NAME.row.json per finished row (a rerun skips those), DIR/sweep.csv,\n"
             "DIR/sweep.json and DIR/pareto.svg (perplexity against bits/weight, references as lines).\n\n"
             "example:\n  bonsai sweep -m zh-tiny-qwen3 --plans b19.yaml b22.yaml ternary-keep-embed-head-q8 \\\n"
             "      --eval eval.txt --stats zh.stats.gguf -o sweep/\n\n"
             "Job array (Slurm; scripts/sweep_slurm.sh submits all three, docs/scale.md): the rows\n"
             "run in parallel as three jobs, each given the same options ARGS:\n"
             "  1. bonsai sweep ARGS --prepare\n"
             "     makes what the tasks share, so that they never race to write it: DIR/bf16.row.json and\n"
             "     DIR/bf16.kld (the KLD base) and, unless the --stats file exists, the statistics file,\n"
             "     measured by the first plan that needs it (that plan's row is then done too).\n"
             "  2. bonsai sweep ARGS --task-index $SLURM_ARRAY_TASK_ID\n"
             "     sbatch --array=0-(N-1) --dependency=afterok:JOB1, N the lines of --list-tasks: one row\n"
             "     per task (DIR/NAME.gguf, DIR/NAME.row.json); a row finished earlier is skipped. A task\n"
             "     refuses to start, naming the file, when a file of job 1 is missing.\n"
             "  3. bonsai sweep ARGS\n"
             "     sbatch --dependency=afterok:JOB2: finds every row finished and writes sweep.csv,\n"
             "     sweep.json and pareto.svg (jobs 1 and 2 write no table).",
             opts, {}, vm))
    return 0;
  so.model = vm["model"].as<std::string>();
  if (vm.count("method")) so.method = quant::parse_method(vm["method"].as<std::string>());
  so.q8_reference = !vm["no-q8-reference"].as<bool>();
  so.device = vm["device"].as<std::string>();
  so.threads = vm["threads"].as<int>();
  const bool json = vm["json"].as<bool>();
  const bool prepare = vm["prepare"].as<bool>(), list = vm["list-tasks"].as<bool>();
  if (int(prepare) + int(list) + int(vm.count("task-index")) > 1)
    throw po::error("--prepare, --task-index and --list-tasks are steps of their own: give at most one");
  if (list) {
    const std::vector<mixed::SweepTask> tasks = mixed::sweep_tasks(so);
    nlohmann::json all = nlohmann::json::array();
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (json) all.push_back({{"index", i}, {"name", tasks[i].name}, {"kind", tasks[i].kind}, {"plan", tasks[i].plan}});
      else std::printf("%zu %s %s\n", i, tasks[i].name.c_str(), tasks[i].plan.c_str());
    }
    if (json) print_json(all);
    return 0;
  }
  if (prepare) so.step = mixed::SweepStep::prepare;
  if (vm.count("task-index")) so.step = mixed::SweepStep::task;
  mixed::SweepEvents ev;
  ev.info = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  const std::vector<mixed::SweepRow> rows = mixed::run_sweep(so, ev);
  if (json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& r : rows) all.push_back(nlohmann::json(mixed::to_json(r)));
    print_json(all);
    return 0;
  }
  std::printf("%-32s %10s %12s %18s %12s %10s\n", "row", "bpw(blk)", "tensor MiB", "PPL", "KLD", "stats");
  for (const auto& r : rows)
    std::printf("%-32s %10.4f %12.2f %10.3f +/- %5.2f %12.6f %10s\n", r.name.c_str(), r.bpw_block,
                double(r.tensor_bytes) / 1048576.0, r.ppl, r.ppl_err, r.kld_mean.value_or(0), r.statistics.c_str());
  if (so.step == mixed::SweepStep::all) std::printf("wrote %s/sweep.csv, sweep.json, pareto.svg\n", so.out_dir.c_str());
  else std::printf("rows in %s/NAME.row.json; the plain sweep with the same options merges them\n", so.out_dir.c_str());
  return 0;
}

const Registrar reg({"sweep", "quantize with several plans from one statistics file; perplexity, KLD, Pareto plot", run});

}  // namespace
}  // namespace bonsai::cli
