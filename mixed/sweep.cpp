#include "mixed/sweep.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/text_file.h"
#include "quantize/pipeline.h"
#include "runtime/kld.h"
#include "runtime/load.h"

namespace bonsai::mixed {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ordered_json to_json(const SweepRow& r) {
  ordered_json j;
  j["name"] = r.name;
  j["kind"] = r.kind;
  j["plan"] = r.plan;
  j["tensor_bytes"] = r.tensor_bytes;
  j["file_bytes"] = r.file_bytes;
  j["block_linear_bytes"] = r.block_linear_bytes;
  j["block_linear_elems"] = r.block_linear_elems;
  j["bpw_block_linear"] = r.bpw_block;
  j["ppl"] = r.ppl;
  j["ppl_err"] = r.ppl_err;
  j["chunks"] = r.chunks;
  j["tokens_scored"] = r.tokens_scored;
  if (r.kld_mean) {
    j["kld_mean"] = *r.kld_mean;
    j["kld_err"] = r.kld_err.value_or(0);
    j["kld_p99"] = r.kld_p99.value_or(0);
    j["top1_agreement"] = r.top1.value_or(0);
  }
  if (r.dlnppl) {
    j["delta_ln_ppl"] = *r.dlnppl;
    j["delta_ln_ppl_err"] = r.dlnppl_err.value_or(0);
  }
  j["statistics"] = r.statistics;
  j["quantize_s"] = r.quantize_s;
  j["eval_s"] = r.eval_s;
  return j;
}

SweepRow sweep_row_from_json(const nlohmann::json& j, const std::string& source) {
  SweepRow r;
  try {
    r.name = j.at("name").get<std::string>();
    r.kind = j.at("kind").get<std::string>();
    r.plan = j.at("plan").get<std::string>();
    r.tensor_bytes = j.at("tensor_bytes").get<uint64_t>();
    r.file_bytes = j.at("file_bytes").get<uint64_t>();
    r.block_linear_bytes = j.at("block_linear_bytes").get<uint64_t>();
    r.block_linear_elems = j.at("block_linear_elems").get<int64_t>();
    r.bpw_block = j.at("bpw_block_linear").get<double>();
    r.ppl = j.at("ppl").get<double>();
    r.ppl_err = j.at("ppl_err").get<double>();
    r.chunks = j.at("chunks").get<int64_t>();
    r.tokens_scored = j.at("tokens_scored").get<int64_t>();
    if (j.contains("kld_mean")) {
      r.kld_mean = j.at("kld_mean").get<double>();
      r.kld_err = j.at("kld_err").get<double>();
      r.kld_p99 = j.at("kld_p99").get<double>();
      r.top1 = j.at("top1_agreement").get<double>();
    }
    if (j.contains("delta_ln_ppl")) {
      r.dlnppl = j.at("delta_ln_ppl").get<double>();
      r.dlnppl_err = j.at("delta_ln_ppl_err").get<double>();
    }
    r.statistics = j.at("statistics").get<std::string>();
    r.quantize_s = j.at("quantize_s").get<double>();
    r.eval_s = j.at("eval_s").get<double>();
  } catch (const nlohmann::json::exception& e) {
    fail(source, "malformed sweep row (delete it to measure the row again): ", e.what());
  }
  if (!(r.ppl > 0) || !std::isfinite(r.ppl)) fail(source, "perplexity ", r.ppl, " is not a measured value");
  return r;
}

std::string row_path(const std::string& dir, const std::string& name) { return (fs::path(dir) / (name + ".row.json")).string(); }

std::optional<SweepRow> finished_row(const std::string& dir, const std::string& name) {
  const std::string p = row_path(dir, name);
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(p));
  } catch (const nlohmann::json::exception& e) {
    fail(p, "is not JSON (delete it to measure the row again): ", e.what());
  }
  SweepRow r = sweep_row_from_json(j, p);
  if (r.name != name) fail(p, "holds row '", r.name, "', not '", name, "'");
  return r;
}

void save_row(const std::string& dir, const SweepRow& r) { write_text_file(row_path(dir, r.name), to_json(r).dump(1) + "\n"); }

std::string rows_csv(const std::vector<SweepRow>& rows) {
  std::string o =
      "name,kind,plan,bpw_block_linear,block_linear_bytes,tensor_bytes,file_bytes,ppl,ppl_err,kld_mean,kld_err,kld_p99,"
      "top1_agreement,delta_ln_ppl,delta_ln_ppl_err,chunks,tokens_scored,statistics,quantize_s,eval_s\n";
  char b[512];
  for (const SweepRow& r : rows) {
    auto opt = [](const std::optional<double>& v) {
      char t[32] = "";
      if (v) std::snprintf(t, sizeof t, "%.6g", *v);
      return std::string(t);
    };
    std::snprintf(b, sizeof b, "%.4f,%llu,%llu,%llu,%.4f,%.4f,", r.bpw_block,
                  static_cast<unsigned long long>(r.block_linear_bytes), static_cast<unsigned long long>(r.tensor_bytes),
                  static_cast<unsigned long long>(r.file_bytes), r.ppl, r.ppl_err);
    o += r.name + "," + r.kind + "," + r.plan + "," + b + opt(r.kld_mean) + "," + opt(r.kld_err) + "," + opt(r.kld_p99) +
         "," + opt(r.top1) + "," + opt(r.dlnppl) + "," + opt(r.dlnppl_err) + ",";
    std::snprintf(b, sizeof b, "%lld,%lld,%s,%.1f,%.1f\n", static_cast<long long>(r.chunks),
                  static_cast<long long>(r.tokens_scored), r.statistics.c_str(), r.quantize_s, r.eval_s);
    o += b;
  }
  return o;
}

std::vector<size_t> pareto_front(const std::vector<SweepRow>& rows) {
  std::vector<size_t> front;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].kind != "plan") continue;
    bool dominated = false;
    for (size_t k = 0; k < rows.size() && !dominated; ++k)
      dominated = k != i && rows[k].kind == "plan" && rows[k].bpw_block <= rows[i].bpw_block && rows[k].ppl <= rows[i].ppl &&
                  (rows[k].bpw_block < rows[i].bpw_block || rows[k].ppl < rows[i].ppl);
    if (!dominated) front.push_back(i);
  }
  std::sort(front.begin(), front.end(), [&](size_t a, size_t b) { return rows[a].bpw_block < rows[b].bpw_block; });
  return front;
}

plot::XYChart pareto_chart(const std::vector<SweepRow>& rows, const std::string& title) {
  plot::XYChart c;
  c.title = title;
  c.x_label = "bits/weight over the block linear weights";
  c.y_label = "perplexity (log scale)";
  c.log_y = true;
  plot::Series pts;
  pts.name = "plans";
  for (const SweepRow& r : rows) {
    if (r.kind == "reference") {
      char b[64];
      std::snprintf(b, sizeof b, " %.1f (%.2f bpw)", r.ppl, r.bpw_block);
      c.refs.push_back({r.name + b, r.ppl});
      continue;
    }
    pts.x.push_back(r.bpw_block);
    pts.y.push_back(r.ppl);
    pts.labels.push_back(r.name);
  }
  plot::Series front;
  front.name = "Pareto front";
  front.line = true;
  front.markers = false;
  for (size_t i : pareto_front(rows)) {
    front.x.push_back(rows[i].bpw_block);
    front.y.push_back(rows[i].ppl);
  }
  c.series.push_back(std::move(pts));
  if (front.x.size() > 1) c.series.push_back(std::move(front));
  return c;
}

std::vector<SweepTask> sweep_tasks(const SweepOptions& o) {
  // Row names: the plans' own, distinct, and not the references'.
  std::vector<SweepTask> tasks;
  std::set<std::string> names = {"bf16"};
  for (const std::string& p : o.plans) {
    const quant::Plan plan = quant::load_plan(p);
    if (!names.insert(plan.name).second || (o.q8_reference && plan.name == "q8_0"))
      fail(p, "plan name '", plan.name, "' is used twice in this sweep (rows are keyed by name; rename the file or set 'name:')");
    for (char ch : plan.name)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.')
        fail(p, "plan name '", plan.name, "' has a character other than letters, digits, '-', '_', '.'");
    tasks.push_back({plan.name, "plan", p});
  }
  if (o.q8_reference) tasks.push_back({"q8_0", "reference", (fs::path(o.out_dir) / "q8_0.yaml").string()});
  return tasks;
}

namespace {

const char kQ8Plan[] = "name: q8_0\ndescription: reference, every matrix Q8_0 (as bonsai convert --type q8_0)\ndefault: Q8_0\n";

std::string stats_path(const SweepOptions& o) {
  return o.stats.empty() ? (fs::path(o.out_dir) / "stats.gguf").string() : o.stats;
}
std::string base_kld_path(const SweepOptions& o) { return (fs::path(o.out_dir) / "bf16.kld").string(); }
bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// What `bonsai quantize` is asked for row `t`: one definition for the real run and the dry run.
quant::QuantizeOptions quantize_options(const SweepOptions& o, const SweepTask& t) {
  quant::QuantizeOptions qo;
  qo.source = o.model;
  qo.output = (fs::path(o.out_dir) / (t.name + ".gguf")).string();
  qo.plan = t.plan;
  qo.method = o.method;
  qo.stats_path = stats_path(o);
  qo.calib_files = o.calib_files;
  qo.calib_windows = o.calib_windows;
  qo.calib_len = o.calib_len;
  qo.seed = o.seed;
  qo.device = o.device;  // the calibration and gptq run where the evaluation does
  // A row killed part-way (a job's time limit, a preempted task) left its finished blocks in
  // NAME.gguf.partial/: the rerun of that row continues from them. The checkpoint refuses (naming
  // its state file) when the row's options changed since.
  qo.partial = quant::PartialMode::resume;
  return qo;
}

// Whether quantizing plan `t` needs the statistics file (some tensor's method uses E[x²]): the
// plan resolved against the model's tensors, nothing computed.
bool needs_statistics(const SweepOptions& o, const SweepTask& t) {
  if (t.kind != "plan") return false;
  quant::QuantizeOptions qo = quantize_options(o, t);
  qo.dry_run = true;
  return quant::quantize_model(qo).plan.needs_importance();
}

[[noreturn]] void missing_base(const std::string& file) {
  fail(file, "missing: the BF16 base (row and distributions, the KLD base) is made by `bonsai sweep ... --prepare` ",
       "with the same options, which must finish before the tasks start");
}

// A task's inputs that `prepare` makes, checked before any work: an Error naming the first missing.
void check_task_inputs(const SweepOptions& o, const SweepTask& t) {
  for (const std::string& f : {row_path(o.out_dir, "bf16"), base_kld_path(o)})
    if (!exists(f)) missing_base(f);
  if (!exists(row_path(o.out_dir, t.name)) && !exists(stats_path(o)) && needs_statistics(o, t))
    fail(stats_path(o), "missing: plan '", t.name, "' (", t.plan, ") needs the statistics file, which `bonsai sweep ... ",
         "--prepare` measures; a task never measures it (concurrent tasks would race to write it)");
}

// The state the rows share: the base model, the evaluation tokens, the base's distributions (the
// KLD base), the statistics file's path.
class Sweep {
 public:
  Sweep(const SweepOptions& o, const SweepEvents& ev)
      : o_(o),
        ev_(ev),
        dir_(o.out_dir),
        stats_(stats_path(o)),
        base_kld_(base_kld_path(o)) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (!fs::is_directory(dir_, ec)) fail(dir_, "cannot create the output folder");
    backend_ = make_backend(o.device, o.threads);
    base_model_ = load_model(o.model);
    const auto tok = model_tokenizer(*base_model_);
    po_.n_ctx = o.ctx;
    po_.max_chunks = o.chunks;
    po_.add_bos = tok->add_bos_default();
    po_.bos = tok->bos();
    tokens_ = tok->encode(read_text_file(o.eval_text), po_.add_bos, false);
    kh_.n_vocab = base_model_->cfg.n_vocab;
    kh_.n_ctx = o.ctx;
    kh_.k = o.kl_top_k;
    kh_.tokens_hash = hash_tokens(tokens_);
  }

  const std::string& stats() const { return stats_; }
  bool stats_exist() const { return exists(stats_); }

  // The BF16 row, its distributions loaded as the KLD base: read back when finished earlier (the
  // saved distributions checked against this run's text and context), else measured and saved
  // when `may_measure`, else an Error naming the missing file.
  SweepRow base(bool may_measure);
  // `t`'s row: read back when finished earlier, else quantized (OUT/NAME.gguf, its log beside it),
  // measured and saved.
  SweepRow row(const SweepTask& t);
  void write_summary(const std::vector<SweepRow>& rows) const;

 private:
  void info(const std::string& s) const {
    if (ev_.info) ev_.info(s);
  }
  void measure(const Model& m, SweepRow& r, bool save);

  const SweepOptions& o_;
  const SweepEvents& ev_;
  const std::string dir_, stats_, base_kld_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> base_model_;
  PerplexityOptions po_;
  std::vector<int32_t> tokens_;
  KldHeader kh_;
  KldBase base_;
  bool calibrated_here_ = false;
};

void block_linear(const TensorSet& ts, SweepRow& r) {
  for (const Tensor& t : ts.tensors) {
    r.tensor_bytes += t.nbytes;
    if (quant::block_index(t.name) >= 0 && t.ne.size() >= 2 && !t.name.ends_with(".rc_codebook") &&
        t.name.ends_with(".weight"))
      r.block_linear_bytes += t.nbytes, r.block_linear_elems += t.nelements();
  }
  r.bpw_block = r.block_linear_elems ? 8.0 * double(r.block_linear_bytes) / double(r.block_linear_elems) : 0;
}

void Sweep::measure(const Model& m, SweepRow& r, bool save) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<KldRecorder> rec;
  if (save) {
    const int64_t chunks = perplexity_chunks(int64_t(tokens_.size()), o_.ctx, o_.chunks);
    require_space(base_kld_, kld_base_bytes(kh_, chunks, o_.kl_chunks), available_bytes(base_kld_));
    rec = std::make_unique<KldRecorder>(kh_, base_kld_);
  }
  const KldRun run = perplexity_kld(m, *backend_, tokens_, po_, o_.eval_text, rec.get(), o_.kl_chunks,
                                    save ? nullptr : &base_, [&](int64_t i, double ppl) {
                                      if ((i + 1) % 25 == 0) info(cat("  ", r.name, ": chunk ", i + 1, ", running PPL ", ppl));
                                    });
  r.eval_s = since(t0);
  r.ppl = run.ppl.ppl;
  r.ppl_err = run.ppl.ppl_err;
  r.chunks = run.ppl.chunks;
  r.tokens_scored = run.ppl.tokens_scored;
  if (save) {
    base_ = rec->finish(run.ppl.chunks, kld_kept_chunks(run.ppl.chunks, o_.kl_chunks));
  } else {
    r.kld_mean = run.kld.mean, r.kld_err = run.kld.mean_err, r.kld_p99 = run.kld.p99, r.top1 = run.kld.top1_agree;
    r.dlnppl = run.kld.dlnppl, r.dlnppl_err = run.kld.dlnppl_err;
  }
}

SweepRow Sweep::base(bool may_measure) {
  std::error_code ec;
  std::optional<SweepRow> bf16 = finished_row(dir_, "bf16");
  const bool kld_there = fs::exists(base_kld_, ec);
  if (bf16 && kld_there) {
    base_ = KldBase::open(base_kld_);
    base_.check_fits(kh_);
    info(cat("bf16: finished earlier (", row_path(dir_, "bf16"), ", ", base_kld_, "), skipped"));
    return *bf16;
  }
  if (!may_measure) missing_base(bf16 ? base_kld_ : row_path(dir_, "bf16"));
  SweepRow r;
  r.name = "bf16";
  r.kind = "reference";
  r.plan = "";
  r.statistics = "not needed";
  block_linear(base_model_->file, r);
  r.file_bytes = fs::is_regular_file(o_.model, ec) ? fs::file_size(o_.model, ec) : 0;
  info(cat("bf16: perplexity of ", o_.model, " on ", o_.eval_text, " (ctx ", o_.ctx, "), saving its distributions to ",
           base_kld_));
  measure(*base_model_, r, true);
  save_row(dir_, r);
  return r;
}

SweepRow Sweep::row(const SweepTask& t) {
  if (auto done = finished_row(dir_, t.name)) {
    info(cat(t.name, ": finished earlier (", row_path(dir_, t.name), "), skipped"));
    return *done;
  }
  if (t.kind == "reference") write_text_file(t.plan, kQ8Plan);
  SweepRow r;
  r.name = t.name;
  r.kind = t.kind;
  r.plan = t.plan;
  const quant::QuantizeOptions qo = quantize_options(o_, t);
  std::string log;
  quant::QuantizeEvents qe;
  qe.info = [&](const std::string& s) { log += s + "\n"; };
  const bool stats_there = stats_exist();
  info(cat(t.name, ": bonsai quantize --plan ", t.plan, " --stats ", stats_,
           stats_there ? " (statistics file present: reused, no calibration forward)" : " (no statistics file yet)"));
  const auto t0 = std::chrono::steady_clock::now();
  const quant::QuantizeResult qr = quant::quantize_model(qo, qe);
  r.quantize_s = since(t0);
  write_text_file((fs::path(dir_) / (t.name + ".quantize.log")).string(), log);
  if (qr.calibrated) {
    if (calibrated_here_ || stats_there) throw Error(cat(t.name, ": calibrated again although ", stats_, " existed"));
    calibrated_here_ = true;
    r.statistics = "calibrated";
    info(cat("  statistics: calibrated (model forward over ", qr.calib_tokens, " tokens per block) and saved to ", stats_));
  } else if (qr.stats_loaded) {
    r.statistics = "loaded";
    info(cat("  statistics: loaded from ", stats_, ", no model forward for calibration"));
  } else {
    r.statistics = "not needed";
    info("  statistics: not needed (no calibrated method in this plan)");
  }
  r.file_bytes = qr.file_bytes;
  auto m = load_model(qo.output);
  block_linear(m->file, r);
  char b[160];
  std::snprintf(b, sizeof b, "  quantized in %.1f s: %.4f bits/weight over the block linear weights, %.2f MiB of tensors",
                r.quantize_s, r.bpw_block, double(r.tensor_bytes) / (1024.0 * 1024.0));
  info(b);
  measure(*m, r, false);
  std::snprintf(b, sizeof b, "  PPL %.4f +/- %.4f, ln(PPL/PPL(bf16)) %+.5f +/- %.5f (paired), KLD %.6f +/- %.6f (%.1f s)",
                r.ppl, r.ppl_err, *r.dlnppl, *r.dlnppl_err, *r.kld_mean, *r.kld_err, r.eval_s);
  info(b);
  save_row(dir_, r);
  return r;
}

void Sweep::write_summary(const std::vector<SweepRow>& rows) const {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const SweepRow& r : rows) all.push_back(to_json(r));
  write_text_file((fs::path(dir_) / "sweep.json").string(), all.dump(1) + "\n");
  write_text_file((fs::path(dir_) / "sweep.csv").string(), rows_csv(rows));
  write_text_file((fs::path(dir_) / "pareto.svg").string(),
                  plot::render(pareto_chart(rows, "perplexity against bits/weight: " + fs::path(o_.eval_text).filename().string())));
}

// "3 tasks, 0 to 2 (0 b19, 1 b22, 2 q8_0)": what a job array's --array must cover.
std::string task_list(const std::vector<SweepTask>& tasks) {
  if (tasks.empty()) return "no tasks";
  std::string s = cat(tasks.size(), " tasks, 0 to ", tasks.size() - 1, " (");
  for (size_t i = 0; i < tasks.size(); ++i) s += cat(i ? ", " : "", i, " ", tasks[i].name);
  return s + ")";
}

// The first job of an array: the base, then (while there is no statistics file) the rows in order
// until one that needs statistics has measured them, exactly as `all` would, so every task finds
// the same file `all` would have used.
std::vector<SweepRow> prepare(Sweep& s, const std::vector<SweepTask>& tasks, const SweepOptions& o) {
  std::vector<SweepRow> rows = {s.base(true)};
  for (const SweepTask& t : tasks) {
    if (s.stats_exist() || t.kind != "plan") break;
    if (finished_row(o.out_dir, t.name) || !needs_statistics(o, t)) continue;
    rows.push_back(s.row(t));
    break;
  }
  return rows;
}

}  // namespace

std::vector<SweepRow> run_sweep(const SweepOptions& o, const SweepEvents& ev) {
  auto info = [&](const std::string& s) {
    if (ev.info) ev.info(s);
  };
  const std::vector<SweepTask> tasks = sweep_tasks(o);
  // Before the model is loaded: a wrong index fails at once, not after seconds of loading.
  if (o.step == SweepStep::task && (o.task_index < 0 || o.task_index >= int64_t(tasks.size())))
    throw Error(cat("task index ", o.task_index, " is out of range: this sweep has ", task_list(tasks)));
  if (o.step == SweepStep::task) check_task_inputs(o, tasks[size_t(o.task_index)]);
  Sweep s(o, ev);
  std::vector<SweepRow> rows;
  switch (o.step) {
    case SweepStep::all:
      rows.push_back(s.base(true));
      s.write_summary(rows);
      for (const SweepTask& t : tasks) {
        rows.push_back(s.row(t));
        s.write_summary(rows);
      }
      return rows;
    case SweepStep::prepare:
      rows = prepare(s, tasks, o);
      info(s.stats_exist() ? cat("statistics: ", s.stats(), " (every task reuses it)")
                           : cat("statistics: none (no unfinished plan's method uses them)"));
      info(cat("prepared: the job array's ", task_list(tasks), " can start"));
      return rows;
    case SweepStep::task: {
      const SweepTask& t = tasks[size_t(o.task_index)];
      rows.push_back(s.base(false));
      info(cat("task ", o.task_index, " of ", tasks.size(), ": ", t.name));
      rows.push_back(s.row(t));
      return rows;
    }
  }
  return rows;
}

}  // namespace bonsai::mixed
