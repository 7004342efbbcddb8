// The sweep's bookkeeping: finished rows are found by name and skipped, damaged row files are
// errors naming them, the Pareto front and the CSV follow the rows; and end to end on zh-tiny, a
// second run of the same sweep measures nothing again.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "formats/text_file.h"
#include "mixed/sweep.h"
#include "quantize/job_support.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::mixed;
namespace fs = std::filesystem;

namespace {

SweepRow row(const std::string& name, const std::string& kind, double bpw, double ppl) {
  SweepRow r;
  r.name = name;
  r.kind = kind;
  r.plan = name + ".yaml";
  r.bpw_block = bpw;
  r.block_linear_elems = 1000;
  r.block_linear_bytes = uint64_t(bpw * 1000 / 8);
  r.ppl = ppl;
  r.ppl_err = 1;
  r.chunks = 3;
  r.tokens_scored = 300;
  r.statistics = "loaded";
  if (kind == "plan") r.kld_mean = 0.01, r.kld_err = 0.001, r.kld_p99 = 0.1, r.top1 = 0.9, r.dlnppl = 0.03, r.dlnppl_err = 0.002;
  return r;
}

}  // namespace

TEST(Sweep, FinishedRowsAreFoundAndDamagedOnesNamed) {
  const auto dir = test::scratch_dir().string();
  EXPECT_FALSE(finished_row(dir, "b22").has_value());
  save_row(dir, row("b22", "plan", 2.2, 720));
  const auto r = finished_row(dir, "b22");
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->ppl, 720);
  EXPECT_DOUBLE_EQ(*r->kld_mean, 0.01);
  EXPECT_DOUBLE_EQ(*r->dlnppl_err, 0.002);
  EXPECT_EQ(r->statistics, "loaded");
  // A row measured before the paired difference was recorded still reads, without it.
  auto old = to_json(row("b21", "plan", 2.1, 730));
  old.erase("delta_ln_ppl");
  old.erase("delta_ln_ppl_err");
  write_text_file(row_path(dir, "b21"), old.dump());
  ASSERT_TRUE(finished_row(dir, "b21").has_value());
  EXPECT_FALSE(finished_row(dir, "b21")->dlnppl.has_value());
  EXPECT_FALSE(finished_row(dir, "b19").has_value());
  write_text_file(row_path(dir, "b19"), "{\"name\": \"b19\"");
  test::expect_error([&] { finished_row(dir, "b19"); }, row_path(dir, "b19"));
  write_text_file(row_path(dir, "b19"), to_json(row("b26", "plan", 2.6, 700)).dump());
  EXPECT_NE(test::expect_error([&] { finished_row(dir, "b19"); }, row_path(dir, "b19")).find("b26"), std::string::npos);
  auto bad = to_json(row("b19", "plan", 1.9, 750));
  bad["ppl"] = 0;
  write_text_file(row_path(dir, "b19"), bad.dump());
  test::expect_error([&] { finished_row(dir, "b19"); }, row_path(dir, "b19"));
}

TEST(Sweep, ParetoFrontCsvAndChart) {
  const std::vector<SweepRow> rows = {row("bf16", "reference", 16, 700), row("a", "plan", 1.75, 745),
                                      row("b", "plan", 2.0, 750), row("c", "plan", 2.2, 725), row("d", "plan", 2.6, 718),
                                      row("q8_0", "reference", 8.5, 701)};
  EXPECT_EQ(pareto_front(rows), (std::vector<size_t>{1, 3, 4}));  // b is beaten by a (smaller and better)
  const std::string csv = rows_csv(rows);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7);
  EXPECT_EQ(csv.rfind("name,kind,plan,bpw_block_linear", 0), 0u);
  EXPECT_NE(csv.find("c,plan,c.yaml,2.2000,"), std::string::npos);
  const plot::XYChart c = pareto_chart(rows, "t");
  ASSERT_EQ(c.refs.size(), 2u);
  EXPECT_DOUBLE_EQ(c.refs[1].y, 701);
  ASSERT_EQ(c.series.size(), 2u);
  EXPECT_EQ(c.series[0].x.size(), 4u);
  EXPECT_EQ(c.series[1].x, (std::vector<double>{1.75, 2.2, 2.6}));
}

TEST(Sweep, SecondRunSkipsFinishedRows) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/config.json");
  BONSAI_REQUIRE_SHARED("corpora/zh/eval-debian-handbook-zh-CN.txt");
  const auto dir = test::scratch_dir();
  // A plan needing no statistics (Q4_0 blocks): the test is about the bookkeeping, not calibration.
  write_text_file((dir / "q4.yaml").string(), "name: q4\ndefault: Q4_0\n");
  SweepOptions o;
  o.model = test::shared_file("models/zh-tiny-qwen3").string();
  o.eval_text = test::shared_file("corpora/zh/eval-debian-handbook-zh-CN.txt").string();
  o.out_dir = (dir / "out").string();
  o.plans = {(dir / "q4.yaml").string()};
  o.ctx = 32;
  o.chunks = 2;
  o.kl_chunks = 1;  // the default every-token layout, one of the two chunks (the paired difference covers both)
  o.q8_reference = false;
  std::string log;
  SweepEvents ev;
  ev.info = [&](const std::string& s) { log += s + "\n"; };
  const auto first = run_sweep(o, ev);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[1].name, "q4");
  EXPECT_EQ(first[1].statistics, "not needed");
  EXPECT_NEAR(first[1].bpw_block, 4.5, 1e-9);
  ASSERT_TRUE(first[1].kld_mean.has_value());
  EXPECT_GT(*first[1].kld_mean, 0);
  ASSERT_TRUE(first[1].dlnppl.has_value());
  EXPECT_GT(*first[1].dlnppl_err, 0);
  for (const char* f : {"bf16.row.json", "bf16.kld", "q4.row.json", "q4.gguf", "sweep.csv", "sweep.json", "pareto.svg"})
    EXPECT_TRUE(fs::exists(dir / "out" / f)) << f;
  EXPECT_EQ(log.find("finished earlier"), std::string::npos);
  // Remove the quantized file: a rerun that quantized again would recreate it.
  fs::remove(dir / "out" / "q4.gguf");
  log.clear();
  const auto second = run_sweep(o, ev);
  EXPECT_NE(log.find("bf16: finished earlier"), std::string::npos) << log;
  EXPECT_NE(log.find("q4: finished earlier"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "out" / "q4.gguf"));
  ASSERT_EQ(second.size(), 2u);
  EXPECT_DOUBLE_EQ(second[1].ppl, first[1].ppl);
}

// A scratch folder with q4.yaml (a plan that needs no statistics) and eval.txt: two chunks' worth of
// the evaluation text, since each step tokenizes it again.
static fs::path small_sweep_inputs() {
  const auto dir = test::scratch_dir();
  write_text_file((dir / "q4.yaml").string(), "name: q4\ndefault: Q4_0\n");
  const std::string eval = read_text_file(test::shared_file("corpora/zh/eval-debian-handbook-zh-CN.txt").string());
  write_text_file((dir / "eval.txt").string(), eval.substr(0, eval.rfind('\n', 4000) + 1));
  return dir;
}

// The job array's steps (SweepStep) on zh-tiny: a task before prepare names the missing base, an
// index out of range lists the tasks, a task whose plan needs statistics that are not there names
// the file (it never measures them); prepare and a task write their rows and no table; the plain
// sweep afterwards measures nothing and writes the table.
TEST(Sweep, JobArrayStepsShareOnlyWhatPrepareMade) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/config.json");
  BONSAI_REQUIRE_SHARED("corpora/zh/eval-debian-handbook-zh-CN.txt");
  const auto dir = small_sweep_inputs();
  SweepOptions o;
  o.model = test::shared_file("models/zh-tiny-qwen3").string();
  o.eval_text = (dir / "eval.txt").string();
  o.out_dir = (dir / "out").string();
  o.plans = {(dir / "q4.yaml").string(), "ternary-all"};  // ternary-all: gptq, needs statistics
  o.ctx = 32;
  o.chunks = 2;
  o.kl_top_k = 8;
  const std::vector<SweepTask> tasks = sweep_tasks(o);
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0].name, "q4");
  EXPECT_EQ(tasks[1].name, "ternary-all");
  EXPECT_EQ(tasks[2].name, "q8_0");
  EXPECT_EQ(tasks[2].kind, "reference");
  std::string log;
  SweepEvents ev;
  ev.info = [&](const std::string& s) { log += s + "\n"; };

  o.step = SweepStep::task;
  o.task_index = 3;
  const std::string range = test::error_of([&] { run_sweep(o, ev); });
  EXPECT_NE(range.find("task index 3 is out of range: this sweep has 3 tasks, 0 to 2 (0 q4, 1 ternary-all, 2 q8_0)"),
            std::string::npos)
      << range;
  o.task_index = 0;
  test::expect_error([&] { run_sweep(o, ev); }, row_path(o.out_dir, "bf16"));

  // A prepare that needed no statistics (its sweep had only q4), then the task of a plan that does.
  SweepOptions p = o;
  p.step = SweepStep::prepare;
  p.plans = {(dir / "q4.yaml").string()};
  ASSERT_EQ(run_sweep(p, ev).size(), 1u);
  EXPECT_NE(log.find("statistics: none"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(dir / "out" / "bf16.row.json"));
  EXPECT_TRUE(fs::exists(dir / "out" / "bf16.kld"));
  EXPECT_FALSE(fs::exists(dir / "out" / "stats.gguf"));
  o.task_index = 1;
  const std::string missing = test::expect_error([&] { run_sweep(o, ev); }, (dir / "out" / "stats.gguf").string());
  EXPECT_NE(missing.find("--prepare"), std::string::npos) << missing;
  EXPECT_FALSE(fs::exists(dir / "out" / "stats.gguf"));

  o.task_index = 0;
  log.clear();
  const auto rows = run_sweep(o, ev);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].name, "q4");
  EXPECT_NE(log.find("bf16: finished earlier"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(dir / "out" / "q4.row.json"));
  EXPECT_FALSE(fs::exists(dir / "out" / "sweep.csv"));  // only the plain sweep writes the table

  p.step = SweepStep::all;
  p.q8_reference = false;
  log.clear();
  const auto merged = run_sweep(p, ev);
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_NE(log.find("q4: finished earlier"), std::string::npos) << log;
  EXPECT_EQ(log.find("bonsai quantize"), std::string::npos) << log;
  EXPECT_NE(read_text_file((dir / "out" / "sweep.csv").string()).find("\nq4,plan,"), std::string::npos);
}

// The CLI: --list-tasks numbers the rows as --task-index takes them, reading no model; the steps
// exclude each other.
TEST(Sweep, CliListsTasksAndRefusesTwoSteps) {
  const auto dir = test::scratch_dir();
  write_text_file((dir / "q4.yaml").string(), "name: q4\ndefault: Q4_0\n");
  const std::string base = "sweep -m no-model --eval no-eval.txt -o " + (dir / "out").string() + " --plans " +
                           (dir / "q4.yaml").string();
  std::string out;
  ASSERT_EQ(test::run_bonsai(base + " --list-tasks", &out), 0) << out;
  EXPECT_EQ(out, "0 q4 " + (dir / "q4.yaml").string() + "\n1 q8_0 " + (dir / "out" / "q8_0.yaml").string() + "\n");
  EXPECT_FALSE(fs::exists(dir / "out"));
  EXPECT_NE(test::run_bonsai(base + " --prepare --task-index 0", &out), 0);
  EXPECT_NE(out.find("at most one"), std::string::npos) << out;
  ASSERT_EQ(test::run_bonsai(base + " --help", &out), 0) << out;
  for (const char* s : {"--prepare", "--task-index", "--list-tasks", "SLURM_ARRAY_TASK_ID", "afterok"})
    EXPECT_NE(out.find(s), std::string::npos) << s << "\n" << out;
}

// A task killed mid-quantize (a time limit, a preempted job) leaves no row, only the quantize
// checkpoint; its rerun continues from the finished blocks instead of refusing them.
TEST(Sweep, KilledTaskResumesItsRow) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/config.json");
  BONSAI_REQUIRE_SHARED("corpora/zh/eval-debian-handbook-zh-CN.txt");
  const auto dir = small_sweep_inputs();
  const fs::path out = dir / "out";
  const std::string args = "sweep -m " + test::shared_file("models/zh-tiny-qwen3").string() + " --eval " +
                           (dir / "eval.txt").string() + " --ctx 32 --chunks 2 --kl-top-k 8 --no-q8-reference -o " +
                           out.string() + " --plans " + (dir / "q4.yaml").string();
  std::string log;
  ASSERT_EQ(test::run_bonsai(args + " --prepare", &log), 0) << log;
  {
    test::ScopedEnv kill("BONSAI_TEST_KILL_AT", "block:2");
    ASSERT_EQ(test::run_bonsai(args + " --task-index 0", &log, {}), test::kKilled) << log;
  }
  EXPECT_FALSE(fs::exists(row_path(out.string(), "q4")));
  EXPECT_TRUE(fs::exists(test::partial(out / "q4.gguf")));
  ASSERT_EQ(test::run_bonsai(args + " --task-index 0", &log), 0) << log;
  EXPECT_TRUE(fs::exists(row_path(out.string(), "q4")));
  EXPECT_FALSE(fs::exists(test::partial(out / "q4.gguf")));
  const std::string qlog = read_text_file((out / "q4.quantize.log").string());
  EXPECT_NE(qlog.find("2 of 6 blocks already done"), std::string::npos) << qlog;
}

// docs/scale.md shows the lines of scripts/sweep_slurm.sh that submit the three jobs (the
// script sweep_slurm_slow_test.cpp runs on its own Slurm cluster): each is in the script as shown.
TEST(Sweep, DocsShowTheSubmissionScriptsLines) {
  const std::string doc = read_text_file(std::string(BONSAI_SOURCE_DIR) + "/docs/scale.md");
  const std::string script = read_text_file(std::string(BONSAI_SOURCE_DIR) + "/scripts/sweep_slurm.sh");
  const size_t at = doc.find("These are the lines of `scripts/sweep_slurm.sh`");
  ASSERT_NE(at, std::string::npos);
  const size_t from = doc.find("```sh\n", at) + 6, to = doc.find("```\n", from);
  ASSERT_LT(from, to);
  std::stringstream lines(doc.substr(from, to - from));
  int n = 0;
  for (std::string l; std::getline(lines, l);)
    if (!l.empty()) {
      ++n;
      EXPECT_NE(script.find(l + "\n"), std::string::npos) << l;
    }
  EXPECT_EQ(n, 5);
}
