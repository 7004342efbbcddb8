#include "mixed/sweep.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

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
      "top1_agreement,chunks,tokens_scored,statistics,quantize_s,eval_s\n";
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
         "," + opt(r.top1) + ",";
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

std::vector<SweepRow> run_sweep(const SweepOptions& o, const SweepEvents& ev) {
  auto info = [&](const std::string& s) {
    if (ev.info) ev.info(s);
  };
  const std::string dir = o.out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) fail(dir, "cannot create the output folder");
  const std::string stats = o.stats.empty() ? (fs::path(dir) / "stats.gguf").string() : o.stats;

  // Row names: the plans' own, distinct, and not the references'.
  struct Job {
    std::string name, plan, kind;
  };
  std::vector<Job> jobs;
  std::set<std::string> names = {"bf16"};
  for (const std::string& p : o.plans) {
    const quant::Plan plan = quant::load_plan(p);
    if (!names.insert(plan.name).second || (o.q8_reference && plan.name == "q8_0"))
      fail(p, "plan name '", plan.name, "' is used twice in this sweep (rows are keyed by name; rename the file or set 'name:')");
    for (char ch : plan.name)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.')
        fail(p, "plan name '", plan.name, "' has a character other than letters, digits, '-', '_', '.'");
    jobs.push_back({plan.name, p, "plan"});
  }
  if (o.q8_reference) {
    const std::string q8 = (fs::path(dir) / "q8_0.yaml").string();
    write_text_file(q8, "name: q8_0\ndescription: reference, every matrix Q8_0 (as bonsai convert --type q8_0)\ndefault: Q8_0\n");
    jobs.push_back({"q8_0", q8, "reference"});
  }

  std::vector<SweepRow> rows;
  auto write_summary = [&] {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const SweepRow& r : rows) all.push_back(to_json(r));
    write_text_file((fs::path(dir) / "sweep.json").string(), all.dump(1) + "\n");
    write_text_file((fs::path(dir) / "sweep.csv").string(), rows_csv(rows));
    write_text_file((fs::path(dir) / "pareto.svg").string(),
                    plot::render(pareto_chart(rows, "perplexity against bits/weight: " + fs::path(o.eval_text).filename().string())));
  };

  // The base: BF16 as stored. Its distributions are every row's KLD base.
  auto backend = make_backend(o.device, o.threads);
  const std::string base_kld = (fs::path(dir) / "bf16.kld").string();
  std::unique_ptr<Model> base_model = load_model(o.model);
  const auto tok = model_tokenizer(*base_model);
  PerplexityOptions po;
  po.n_ctx = o.ctx;
  po.max_chunks = o.chunks;
  po.add_bos = tok->add_bos_default();
  po.bos = tok->bos();
  const std::vector<int32_t> tokens = tok->encode(read_text_file(o.eval_text), po.add_bos, false);
  KldHeader kh;
  kh.n_vocab = base_model->cfg.n_vocab;
  kh.n_ctx = o.ctx;
  kh.k = o.kl_top_k;
  kh.tokens_hash = hash_tokens(tokens);
  std::vector<BaseDist> base;
  auto block_linear = [](const TensorSet& ts, SweepRow& r) {
    for (const Tensor& t : ts.tensors) {
      r.tensor_bytes += t.nbytes;
      if (quant::block_index(t.name) >= 0 && t.ne.size() >= 2 && !t.name.ends_with(".rc_codebook") &&
          t.name.ends_with(".weight"))
        r.block_linear_bytes += t.nbytes, r.block_linear_elems += t.nelements();
    }
    r.bpw_block = r.block_linear_elems ? 8.0 * double(r.block_linear_bytes) / double(r.block_linear_elems) : 0;
  };
  auto measure = [&](const Model& m, SweepRow& r, bool save) {
    const auto t0 = std::chrono::steady_clock::now();
    const KldRun run = perplexity_kld(m, *backend, tokens, po, o.eval_text, save ? o.kl_top_k : 0, save ? nullptr : &base,
                                      base_kld, [&](int64_t i, double ppl) {
                                        if ((i + 1) % 25 == 0) info(cat("  ", r.name, ": chunk ", i + 1, ", running PPL ", ppl));
                                      });
    r.eval_s = since(t0);
    r.ppl = run.ppl.ppl;
    r.ppl_err = run.ppl.ppl_err;
    r.chunks = run.ppl.chunks;
    r.tokens_scored = run.ppl.tokens_scored;
    if (save) {
      kh.chunks = run.ppl.chunks;
      write_kld(base_kld, kh, run.saved);
      base = run.saved;
    } else {
      r.kld_mean = run.kld.mean, r.kld_err = run.kld.mean_err, r.kld_p99 = run.kld.p99, r.top1 = run.kld.top1_agree;
    }
  };

  std::optional<SweepRow> bf16 = finished_row(dir, "bf16");
  if (bf16 && fs::exists(base_kld, ec)) {
    KldHeader bh;
    base = read_kld(base_kld, &bh);
    check_kld_base(base_kld, bh, kh);
    info(cat("bf16: finished earlier (", row_path(dir, "bf16"), ", ", base_kld, "), skipped"));
  } else {
    SweepRow r;
    r.name = "bf16";
    r.kind = "reference";
    r.plan = "";
    r.statistics = "not needed";
    block_linear(base_model->file, r);
    std::error_code e2;
    r.file_bytes = fs::is_regular_file(o.model, e2) ? fs::file_size(o.model, e2) : 0;
    info(cat("bf16: perplexity of ", o.model, " on ", o.eval_text, " (ctx ", o.ctx, "), saving its distributions to ",
             base_kld));
    measure(*base_model, r, true);
    save_row(dir, r);
    bf16 = r;
  }
  rows.push_back(*bf16);
  write_summary();

  bool calibrated_here = false;
  for (const Job& job : jobs) {
    if (auto done = finished_row(dir, job.name)) {
      info(cat(job.name, ": finished earlier (", row_path(dir, job.name), "), skipped"));
      rows.push_back(*done);
      continue;
    }
    SweepRow r;
    r.name = job.name;
    r.kind = job.kind;
    r.plan = job.plan;
    quant::QuantizeOptions qo;
    qo.source = o.model;
    qo.output = (fs::path(dir) / (job.name + ".gguf")).string();
    qo.plan = job.plan;
    qo.method = o.method;
    qo.stats_path = stats;
    qo.calib_files = o.calib_files;
    qo.calib_windows = o.calib_windows;
    qo.calib_len = o.calib_len;
    qo.seed = o.seed;
    std::string log;
    quant::QuantizeEvents qe;
    qe.info = [&](const std::string& s) { log += s + "\n"; };
    const bool stats_there = fs::exists(stats, ec);
    info(cat(job.name, ": bonsai quantize --plan ", job.plan, " --stats ", stats,
             stats_there ? " (statistics file present: reused, no calibration forward)" : " (no statistics file yet)"));
    const auto t0 = std::chrono::steady_clock::now();
    const quant::QuantizeResult qr = quant::quantize_model(qo, qe);
    r.quantize_s = since(t0);
    write_text_file((fs::path(dir) / (job.name + ".quantize.log")).string(), log);
    if (qr.calibrated) {
      if (calibrated_here || stats_there) throw Error(cat(job.name, ": calibrated again although ", stats, " existed"));
      calibrated_here = true;
      r.statistics = "calibrated";
      info(cat("  statistics: calibrated (model forward over ", qr.calib_tokens, " tokens per block) and saved to ", stats));
    } else if (qr.stats_loaded) {
      r.statistics = "loaded";
      info(cat("  statistics: loaded from ", stats, ", no model forward for calibration"));
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
    std::snprintf(b, sizeof b, "  PPL %.4f +/- %.4f, KLD %.6f +/- %.6f (%.1f s)", r.ppl, r.ppl_err, *r.kld_mean, *r.kld_err,
                  r.eval_s);
    info(b);
    save_row(dir, r);
    rows.push_back(r);
    write_summary();
  }
  write_summary();
  return rows;
}

}  // namespace bonsai::mixed
