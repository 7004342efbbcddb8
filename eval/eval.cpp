#include "eval/eval.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "datasets/choice_tasks.h"
#include "eval/result_json.h"
#include "eval/tasks.h"
#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/kill_point.h"
#include "formats/text_file.h"
#include "plot/svg.h"
#include "runtime/kld.h"
#include "runtime/load.h"

namespace bonsai::eval {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::vector<std::string> short_names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  std::map<std::string, int> seen;
  for (const std::string& p : paths) {
    fs::path f(p);
    while (!f.empty() && f.filename().empty()) f = f.parent_path();  // "dir/" -> "dir"
    std::string n = f.stem().string();
    if (n.empty()) n = "model";
    const int k = ++seen[n];
    out.push_back(k == 1 ? n : cat(n, "-", k));
  }
  return out;
}

namespace {

// What a cell's figures depend on besides its model and text: a finished cell measured with
// other settings is an error, not a silent mix.
ordered_json settings(const EvalOptions& o, bool with_base) {
  ordered_json s = {{"ctx", o.ctx}, {"chunks", o.chunks}};
  if (with_base) s["kl_base"] = {{"model", o.kl_base_model}, {"top_k", o.kl_top_k}, {"chunks", o.kl_chunks}};
  return s;
}

constexpr const char* kTaskKinds[] = {"multiple-choice", "hellaswag", "winogrande"};

class Job {
 public:
  Job(const EvalOptions& o, const EvalEvents& ev) : o_(o), ev_(ev) {
    if (o.models.empty() && o.kl_base_model.empty()) throw Error("bonsai eval: no --models");
    if (o.texts.empty() && o.tasks.empty()) throw Error("bonsai eval: no --texts and no --tasks");
    if (!o.kl_base_model.empty()) models_.push_back(o.kl_base_model);
    for (const std::string& m : o.models)
      if (m != o.kl_base_model) models_.push_back(m);
    model_names_ = short_names(models_);
    paths_ = o.texts;
    kinds_.assign(o.texts.size(), "");
    for (const std::string& t : o.tasks) {
      const size_t colon = t.find(':');
      const std::string kind = colon == std::string::npos ? "" : t.substr(0, colon);
      if (std::find(std::begin(kTaskKinds), std::end(kTaskKinds), kind) == std::end(kTaskKinds))
        throw Error(cat("--tasks ", t, ": give KIND:FILE, KIND one of multiple-choice, hellaswag, winogrande"));
      kinds_.push_back(kind);
      paths_.push_back(t.substr(colon + 1));
    }
    text_names_ = short_names(paths_);
    for (const std::string& t : paths_)
      if (!fs::is_regular_file(t)) fail(t, "no such file");
    std::error_code ec;
    for (const char* sub : {"cells", "kld"}) fs::create_directories(fs::path(o.out_dir) / sub, ec);
    if (!fs::is_directory(fs::path(o.out_dir) / "cells", ec)) fail(o.out_dir, "cannot create the output folder");
  }

  std::vector<Cell> run();

 private:
  bool has_base() const { return !o_.kl_base_model.empty(); }
  size_t columns() const { return paths_.size(); }
  bool is_task(size_t t) const { return !kinds_[t].empty(); }
  ordered_json column_settings(size_t t) const {
    return is_task(t) ? ordered_json{{"task", kinds_[t]}, {"limit", o_.task_limit}} : settings(o_, has_base());
  }
  Cell measure_task(size_t m, size_t t, const Model& model, Backend& backend);
  std::string cell_path(size_t m, size_t t) const {
    return (fs::path(o_.out_dir) / "cells" / (model_names_[m] + "@" + text_names_[t] + ".json")).string();
  }
  std::string kld_path(size_t t) const { return (fs::path(o_.out_dir) / "kld" / (text_names_[t] + ".kld")).string(); }
  std::optional<Cell> finished(size_t m, size_t t) const;
  Cell measure(size_t m, size_t t, const Model& model, Backend& backend);
  void info(const std::string& s) const {
    if (ev_.info) ev_.info(s);
  }

  const EvalOptions& o_;
  const EvalEvents& ev_;
  std::vector<std::string> models_, model_names_, text_names_;
  std::vector<std::string> paths_, kinds_;  // the columns: texts, then tasks (kind "" for a text)
  std::map<size_t, int64_t> text_chunks_;  // chunks per text, from its first tokenization
  int64_t done_chunks_ = 0, total_chunks_ = 0;
};

std::optional<Cell> Job::finished(size_t m, size_t t) const {
  const std::string p = cell_path(m, t);
  if (!fs::exists(p)) return std::nullopt;
  Cell c;
  try {
    c = ordered_json::parse(read_text_file(p));
  } catch (const nlohmann::json::exception& e) {
    fail(p, "is not JSON (delete it to measure the cell again): ", e.what());
  }
  const bool base_cell = has_base() && m == 0 && !is_task(t);
  if (!c.is_object() || !c.contains("settings") || !c.contains(is_task(t) ? "accuracy" : "ppl") ||
      c.value("model_path", "") != models_[m] || c.value("text_path", "") != paths_[t])
    fail(p, "is not this job's cell for ", models_[m], " on ", paths_[t], " (delete it to measure the cell again)");
  if (c["settings"] != column_settings(t))
    fail(p, "was measured with other settings (", c["settings"].dump(), "; this job: ", column_settings(t).dump(),
         "): use another -o, or delete it to measure the cell again");
  if (base_cell && !fs::exists(kld_path(t))) return std::nullopt;  // its distributions are gone: measure again
  return c;
}

Cell Job::measure(size_t m, size_t t, const Model& model, Backend& backend) {
  const std::string& text = o_.texts[t];
  const auto tok = model_tokenizer(model);
  PerplexityOptions po;
  po.n_ctx = o_.ctx;
  po.max_chunks = o_.chunks;
  po.add_bos = tok->add_bos_default();
  po.bos = tok->bos();
  const std::vector<int32_t> tokens = tok->encode(read_text_file(text), po.add_bos, false);
  KldHeader kh;
  kh.n_vocab = model.cfg.n_vocab, kh.n_ctx = o_.ctx, kh.k = o_.kl_top_k, kh.tokens_hash = hash_tokens(tokens);
  const bool is_base = has_base() && m == 0;
  std::unique_ptr<KldRecorder> rec;
  KldBase base;
  if (is_base) {
    const int64_t chunks = perplexity_chunks(int64_t(tokens.size()), o_.ctx, o_.chunks);
    require_space(kld_path(t), kld_base_bytes(kh, chunks, o_.kl_chunks), available_bytes(kld_path(t)));
    rec = std::make_unique<KldRecorder>(kh, kld_path(t));
  } else if (has_base()) {
    base = KldBase::open(kld_path(t));
    base.check_fits(kh);
    po.max_chunks = base.header().chunks;
  }
  const std::string where = cat(model_names_[m], " on ", text_names_[t]);
  const KldRun run = perplexity_kld(model, backend, tokens, po, text, rec.get(), o_.kl_chunks,
                                    has_base() && !is_base ? &base : nullptr, [&](int64_t i, double ppl) {
                                      if (ev_.progress)
                                        ev_.progress(++done_chunks_, total_chunks_,
                                                     cat(where, ": chunk ", i + 1, ", PPL ", ppl));
                                    });
  if (rec) rec->finish(run.ppl.chunks, kld_kept_chunks(run.ppl.chunks, o_.kl_chunks));
  Cell c = {{"model", model_names_[m]}, {"model_path", models_[m]}, {"text", text_names_[t]}, {"text_path", text},
            {"settings", settings(o_, has_base())}};
  c.update(perplexity_json(run.ppl));
  if (has_base() && !is_base) {
    c["kld"] = kld_json(run.kld, base);
    c["paired"] = paired_json(run.kld);
  }
  write_text_file(cell_path(m, t), c.dump(1) + "\n");
  kill_point("cell");
  return c;
}

Cell Job::measure_task(size_t m, size_t t, const Model& model, Backend& backend) {
  const std::string& path = paths_[t];
  const std::string bytes = read_text_file(path);
  const auto tok = model_tokenizer(model);
  TaskScore r;
  info(cat(model_names_[m], " on ", text_names_[t], ": ", kinds_[t], " tasks"));
  if (kinds_[t] == "winogrande") {
    auto tasks = parse_winogrande(bytes, path);
    if (o_.task_limit >= 0 && tasks.size() > size_t(o_.task_limit)) tasks.resize(size_t(o_.task_limit));
    r = score_winogrande(model, backend, *tok, tasks);
  } else {
    auto tasks = kinds_[t] == "hellaswag" ? parse_hellaswag(bytes, path) : datasets::parse_choice_tasks(bytes, path);
    if (o_.task_limit >= 0 && tasks.size() > size_t(o_.task_limit)) tasks.resize(size_t(o_.task_limit));
    r = score_choices(model, backend, *tok, tasks);
  }
  Cell c = {{"model", model_names_[m]}, {"model_path", models_[m]},  {"text", text_names_[t]},
            {"text_path", path},         {"task", kinds_[t]},        {"settings", column_settings(t)},
            {"tasks", r.tasks},          {"correct", r.correct},     {"accuracy", r.accuracy},
            {"accuracy_err", r.accuracy_err}, {"chance", r.chance},  {"seconds", r.seconds}};
  write_text_file(cell_path(m, t), c.dump(1) + "\n");
  kill_point("cell");
  return c;
}

std::vector<Cell> Job::run() {
  // What is left, and an estimate of its chunks for the progress line.
  std::vector<std::vector<std::optional<Cell>>> done(models_.size());
  int64_t left = 0;
  for (size_t m = 0; m < models_.size(); ++m)
    for (size_t t = 0; t < columns(); ++t) {
      done[m].push_back(finished(m, t));
      left += !done[m].back();
    }
  info(cat("eval: ", models_.size(), " models x ", o_.texts.size(), " texts", o_.tasks.empty() ? "" : cat(" + ", o_.tasks.size(), " tasks"),
           ", ", left, " of ", models_.size() * columns(), " cells to measure",
           has_base() ? cat(" (KLD against ", model_names_[0], ")") : ""));
  std::unique_ptr<Backend> backend;
  for (size_t m = 0; m < models_.size(); ++m) {
    bool any = false;
    for (auto& c : done[m]) any |= !c;
    if (!any) {
      info(cat(model_names_[m], ": every cell finished earlier, skipped"));
      continue;
    }
    if (!backend) backend = make_backend(o_.device, o_.threads);
    info(cat(model_names_[m], ": loading ", models_[m]));
    const auto model = load_model(models_[m]);
    if (total_chunks_ == 0) {  // one tokenization per text estimates every cell's chunks
      const auto tok = model_tokenizer(*model);
      for (size_t t = 0; t < o_.texts.size(); ++t) {
        const int64_t n = int64_t(tok->encode(read_text_file(o_.texts[t]), tok->add_bos_default(), false).size());
        text_chunks_[t] = perplexity_chunks(n, o_.ctx, o_.chunks);
      }
      for (size_t mm = 0; mm < models_.size(); ++mm)
        for (size_t t = 0; t < o_.texts.size(); ++t)
          if (!done[mm][t]) total_chunks_ += text_chunks_[t];
    }
    for (size_t t = 0; t < columns(); ++t) {
      if (done[m][t]) {
        info(cat(model_names_[m], " on ", text_names_[t], ": finished earlier (", cell_path(m, t), "), skipped"));
        continue;
      }
      done[m][t] = is_task(t) ? measure_task(m, t, *model, *backend) : measure(m, t, *model, *backend);
    }
  }
  std::vector<Cell> cells;
  for (auto& row : done)
    for (auto& c : row) cells.push_back(*c);
  ordered_json all = ordered_json::array();
  for (const Cell& c : cells) all.push_back(c);
  write_text_file((fs::path(o_.out_dir) / "eval.json").string(), all.dump(1) + "\n");
  write_text_file((fs::path(o_.out_dir) / "eval.csv").string(), cells_csv(cells));
  // One series per text: perplexity of each model, models along x in the order given.
  if (o_.texts.empty()) return cells;  // tasks only: no perplexity to draw
  plot::XYChart chart;
  chart.title = "perplexity of each model on each text";
  chart.x_label = "model (1 = " + model_names_[0] + ")";
  chart.y_label = "perplexity (log scale)";
  chart.log_y = true;
  for (size_t t = 0; t < o_.texts.size(); ++t) {
    plot::Series s;
    s.name = text_names_[t];
    s.line = true;
    for (size_t m = 0; m < models_.size(); ++m) {
      s.x.push_back(double(m + 1));
      s.y.push_back((*done[m][t])["ppl"].get<double>());
      s.labels.push_back(model_names_[m]);
    }
    chart.series.push_back(std::move(s));
  }
  write_text_file((fs::path(o_.out_dir) / "eval.svg").string(), plot::render(chart));
  return cells;
}

}  // namespace

std::vector<Cell> run_eval(const EvalOptions& o, const EvalEvents& ev) { return Job(o, ev).run(); }

std::string cells_csv(const std::vector<Cell>& cells) {
  const char* cols[] = {"ppl", "ppl_err", "tokens_scored", "chunks", "seconds"};
  const char* kld_cols[] = {"mean", "mean_err", "median", "p99", "top1_agreement", "rounding_bound"};
  const char* paired_cols[] = {"delta_ln_ppl", "delta_ln_ppl_err", "delta_ppl", "delta_ppl_err"};
  const char* task_cols[] = {"accuracy", "accuracy_err"};
  std::string o = "model,text";
  for (const char* c : cols) o += cat(",", c);
  for (const char* c : kld_cols) o += cat(",kld_", c);
  for (const char* c : paired_cols) o += cat(",", c);
  o += ",task";
  for (const char* c : task_cols) o += cat(",", c);
  o += "\n";
  // (appends one piece at a time: GCC 12 warns falsely about "," + std::string)
  auto field = [&o](const std::string& v) {
    o += ',';
    o += v;
  };
  for (const Cell& c : cells) {
    o += c["model"].get<std::string>();
    field(c["text"].get<std::string>());
    for (const char* k : cols) field(c.contains(k) && !c.contains("task") ? c[k].dump() : std::string());
    for (const char* k : kld_cols) field(c.contains("kld") ? c["kld"][k].dump() : std::string());
    for (const char* k : paired_cols) field(c.contains("paired") ? c["paired"][k].dump() : std::string());
    field(c.contains("task") ? c["task"].get<std::string>() : std::string());
    for (const char* k : task_cols) field(c.contains(k) ? c[k].dump() : std::string());
    o += '\n';
  }
  return o;
}

}  // namespace bonsai::eval
