#include "quantize/pipeline.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "calibrate/stats.h"
#include "datasets/window_sampler.h"
#include "formats/error.h"
#include "formats/model_file.h"
#include "quantize/grid4.h"
#include "quantize/provenance.h"
#include "quantize/residual.h"
#include "quantize/rotate.h"
#include "quantize/tune.h"
#include "runtime/bench.h"
#include "runtime/load.h"

namespace bonsai::quant {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<float> to_f32(const Tensor& t) {
  std::vector<float> v(size_t(t.nelements()));
  traits(t.type).to_float(t.data, v.data(), t.nelements());
  return v;
}

// Stage 2 on PQ2_0's four-level grid from the stage-1 result `q`: per-group methods refine it
// (never worse per group); gptq reruns with the grid inside its error feedback, and the stage-1
// result is kept for a matrix where that comes out worse, so stage 2 never loses to stage 1.
TernaryMatrix stage2_grid(const MatrixIn& in, Method m, const MethodOptions& mo, TernaryMatrix q, WeightError* err) {
  MethodOptions four = mo;
  four.four_levels = true;
  TernaryMatrix q2 = m == Method::gptq ? quantize_ternary(in, m, four) : refine_grid4(in, q);
  const double e1 = relative_output_error(in, q.dequantize()), e2 = relative_output_error(in, q2.dequantize());
  if (err) err->stage1_error = e1;
  if (e2 <= e1) q = std::move(q2);
  if (err) err->plus2_share = share_of_plus2(q);
  return q;
}

// Quantizes one matrix to its plan type. `w` is its float copy (rotated when the model is);
// `st` its input statistics or null. Ternary types go through the calibrated methods, the others
// through the type table's reference encoder. The error is measured against what the runtime
// will compute with (the decoded result). With a residual (`rc`, ternary types only) its tensors
// go to `extra` and the error is that of Ŵ + R̂.
Tensor quantize_matrix(const Tensor& like, const float* w, const TensorPlan& tp, const calib::InputStats* st,
                       const MethodOptions& mo, TensorSet& owner, WeightError* err, const std::function<void(const std::string&)>& info,
                       const ResidualOptions& rc = {}, std::vector<Tensor>* extra = nullptr,
                       const TernaryMatrix* start = nullptr) {
  const int64_t cols = like.ne[0], rows = like.nelements() / cols;
  std::vector<float> importance;
  std::vector<double> gram;
  MatrixIn in;
  in.w = w;
  in.rows = rows;
  in.cols = cols;
  if (st) {
    if (st->cols != cols)
      throw Error(cat("statistics for '", like.name, "' have ", st->cols, " columns, the weight has ", cols));
    importance = st->mean_sq();
    in.importance = importance.data();
    if (!st->gram.empty()) {
      gram = st->mean_gram();
      in.gram = gram.data();
    }
  }
  Tensor out = like;
  out.type = tp.type;
  out.nbytes = *tensor_bytes(tp.type, like.ne);
  uint8_t* data = owner.alloc(out.nbytes);
  out.data = data;
  std::vector<float> w_hat;
  std::optional<Method> used = tp.method;
  if (is_ternary(tp.type)) {
    Method m = *tp.method;
    if (method_needs_gram(m) && !in.gram) {
      // Only matrices outside the blocks (the embedding lookup) have no statistics.
      if (info)
        info(cat("note: '", like.name, "' has no input statistics: optimal (plain squared error) instead of ",
                 method_name(m)));
      m = Method::optimal;
    }
    used = m;
    TernaryMatrix q = start ? *start : quantize_ternary(in, m, mo);  // --from: the saved stage-1 result
    if (tp.type == TypeId::PQ2_0) q = stage2_grid(in, m, mo, std::move(q), err);
    const std::vector<uint8_t> packed = q.pack(tp.type);
    if (packed.size() != out.nbytes)
      throw Error(cat("packing '", like.name, "' as ", traits(tp.type).name, " gave ", packed.size(), " bytes, expected ",
                      out.nbytes));
    std::copy(packed.begin(), packed.end(), data);
    w_hat = q.dequantize();
    if (rc.kind != ResidualKind::none && extra) {
      // Kept only where it lowers the output error (a tensor without one is valid: the runtime
      // looks residuals up per weight).
      const double e0 = relative_output_error(in, w_hat);
      if (err) err->grid_error = e0;
      const ResidualFit fit = fit_residual(in, w_hat, rc);
      std::vector<float> with = residual_values(fit, rows, cols);
      for (size_t i = 0; i < with.size(); ++i) with[i] += w_hat[i];
      if (relative_output_error(in, with) < e0) {
        w_hat = std::move(with);
        for (Tensor& t : fit.tensors(out, owner)) extra->push_back(std::move(t));
        if (err) err->residual_bytes = fit.bytes();
      } else if (info) {
        info(cat("note: the residual of '", like.name, "' does not lower its output error: not stored"));
      }
    }
  } else {
    const TypeTraits& tt = traits(tp.type);
    w_hat.resize(size_t(rows * cols));
    const uint64_t rb = *row_bytes(tp.type, uint64_t(cols));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      tt.from_float(w + r * cols, data + uint64_t(r) * rb, cols);
      tt.to_float(data + uint64_t(r) * rb, w_hat.data() + r * cols, cols);
    }
  }
  if (err) {
    err->name = like.name;
    err->type = tp.type;
    err->method = used;
    err->gram = in.gram != nullptr;
    err->rel_error = relative_output_error(in, w_hat);
    err->elements = rows * cols;
  }
  return out;
}

// A saved stage-1 result (--from): the codes and scales of a ternary tensor, read back through
// formats' decoder and the canonical re-encoder (a stage-1 block is canonical, so this is exact).
TernaryMatrix stage1_from(const Tensor& t, const Tensor& like, const std::string& path) {
  if (!is_ternary(t.type))
    fail(path, "'", t.name, "' is ", traits(t.type).name, ", not a ternary stage-1 result (PTQ1_0 or PQ2_0)");
  if (t.ne != like.ne) fail(path, "'", t.name, "' has shape ", t.shape_str(), ", the model's is ", like.shape_str());
  std::vector<float> y(size_t(t.nelements()));
  traits(t.type).to_float(t.data, y.data(), t.nelements());
  TernaryMatrix q;
  q.cols = t.ne[0];
  q.rows = t.nelements() / q.cols;
  q.codes.resize(y.size());
  q.scales.resize(y.size() / size_t(kGroup));
  for (size_t b = 0; b < q.scales.size(); ++b)
    q.scales[b] = reencode_grid4(y.data() + b * size_t(kGroup), kGroup, q.codes.data() + b * size_t(kGroup));
  if (std::any_of(q.codes.begin(), q.codes.end(), [](int8_t c) { return c == 2; }))
    fail(path, "'", t.name, "' uses PQ2_0's fourth level: it is a stage-2 result, not a stage-1 one");
  return q;
}

nlohmann::ordered_json rotation_json(const QuantizeOptions& o) {
  if (!o.rotate) return nullptr;
  return {{"transform", "hadamard"}, {"block", o.rotate_block}, {"seed", o.seed}};
}

// Block matrices of a model, in block order: the seven weights a block reads.
std::vector<const Tensor**> block_weights(LayerWeights& l) {
  return {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down};
}

// A WeightError in a checkpoint: doubles as their bits, so a resumed job reports (and stores in
// .bonsai's layer errors) exactly what the uninterrupted job would have, NaN and ∞ included.
nlohmann::ordered_json checkpoint_json(const WeightError& e) {
  auto bits = [](double d) { return std::bit_cast<uint64_t>(d); };
  nlohmann::ordered_json j;
  j["name"] = e.name;
  j["type"] = traits(e.type).name;
  j["method"] = e.method ? nlohmann::ordered_json(method_name(*e.method)) : nullptr;
  j["rel_error"] = bits(e.rel_error);
  j["gram"] = e.gram;
  j["stage1_error"] = e.stage1_error ? nlohmann::ordered_json(bits(*e.stage1_error)) : nullptr;
  j["plus2_share"] = bits(e.plus2_share);
  j["elements"] = e.elements;
  j["grid_error"] = e.grid_error ? nlohmann::ordered_json(bits(*e.grid_error)) : nullptr;
  j["residual_bytes"] = e.residual_bytes;
  return j;
}

WeightError weight_error_from(const nlohmann::ordered_json& j, const std::string& path) {
  auto num = [](const nlohmann::ordered_json& v) { return std::bit_cast<double>(v.get<uint64_t>()); };
  WeightError e;
  try {
    e.name = j.at("name").get<std::string>();
    const TypeTraits* tt = find_type(j.at("type").get<std::string>());
    if (!tt) fail(path, "unknown type '", j.at("type").get<std::string>(), "' for '", e.name, "'");
    e.type = tt->id;
    if (!j.at("method").is_null()) e.method = parse_method(j.at("method").get<std::string>());
    e.rel_error = num(j.at("rel_error"));
    e.gram = j.at("gram").get<bool>();
    if (!j.at("stage1_error").is_null()) e.stage1_error = num(j.at("stage1_error"));
    e.plus2_share = num(j.at("plus2_share"));
    e.elements = j.at("elements").get<int64_t>();
    if (!j.at("grid_error").is_null()) e.grid_error = num(j.at("grid_error"));
    e.residual_bytes = j.at("residual_bytes").get<uint64_t>();
  } catch (const nlohmann::json::exception& x) {
    fail(path, "a weight error entry is malformed: ", x.what());
  }
  return e;
}

}  // namespace

std::vector<std::string> default_calib_files() {
  fs::path dir = "../shared/corpora/zh";
  if (const char* e = std::getenv("BONSAI_SHARED_DIR"); e && *e) dir = fs::path(e) / "corpora/zh";
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && n.starts_with("calib-") && n.ends_with(".txt")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<Model> working_model(const TensorSet& src, const ResolvedPlan& plan, const HadamardSpec* rotation,
                                     const MethodOptions& mo) {
  TensorSet work;
  work.path = src.path;
  work.format = src.format;
  work.meta = src.meta;
  for (const Tensor& t : src.tensors) {
    const TensorPlan* tp = plan.find(t.name);
    if (!tp) fail(src.path, "tensor '", t.name, "' is not in the plan");
    if (t.ne.size() < 2) {
      work.add(t);
    } else if (tp->block >= 0) {
      Tensor f = t.type == TypeId::F32 ? t : convert_tensor(t, TypeId::F32, work);
      if (rotation && rotation->rotates(t.name)) {
        if (f.data == t.data) f = convert_tensor(t, TypeId::F32, work);  // own a copy before folding
        // The bytes were allocated just above by `work`: writable, though Tensor views them as const.
        fold_rotation(*rotation, reinterpret_cast<float*>(const_cast<uint8_t*>(f.data)), f.rows(), f.ne[0]);
      }
      work.add(f);
    } else if (tp->type == t.type) {
      work.add(t);
    } else {
      const std::vector<float> w = to_f32(t);
      work.add(quantize_matrix(t, w.data(), *tp, nullptr, mo, work, nullptr, {}));
    }
  }
  auto m = load_model(std::move(work));
  if (rotation) {
    if (!m->hadamard.empty()) fail(src.path, "the model is already rotated (prism.hadamard.*): do not rotate it again");
    m->hadamard = *rotation;
  }
  return m;
}

namespace {

// quantize_model with its checkpoint (null: none).
QuantizeResult run_quantize(const QuantizeOptions& o, const QuantizeEvents& ev, JobCheckpoint* ck) {
  QuantizeResult res;
  auto info = [&](const std::string& s) {
    if (ev.info) ev.info(s);
  };
  auto t0 = Clock::now();
  auto stage = [&](const char* name) {
    res.stages.push_back({name, since(t0), peak_rss_bytes()});
    t0 = Clock::now();
  };

  // Source and plan: printed before any work.
  const TensorSet src = open_model(o.source);
  const ModelConfig cfg = read_model_config(src);
  Plan plan = load_plan(o.plan);
  if (o.ternary_type) set_ternary_type(plan, *o.ternary_type);
  apply_overrides(plan, o.overrides);
  res.plan = resolve_plan(plan, src.tensors, cfg.n_layer, o.method, kDefaultMethod);
  const ResolvedPlan& rp = res.plan;
  // A build without LibTorch refuses tune before any work (not after calibrating).
  for (const auto& t : rp.tensors)
    if (t.method == Method::tune) require_torch();
  info(cat("plan ", rp.plan_name, " (", rp.plan_source, ") on ", o.source, ":"));
  info(rp.table());
  if (o.dry_run) return res;
  stage("open source and plan");

  // Working model, rotated when asked.
  std::optional<HadamardSpec> rotation;
  if (o.rotate) {
    std::vector<std::pair<std::string, int64_t>> rotated;
    for (const auto& t : rp.tensors)
      if (t.block >= 0 && t.ne.size() >= 2) rotated.emplace_back(t.name, t.ne[0]);
    rotation = make_rotation(rotated, o.rotate_block, o.seed);
  }
  std::unique_ptr<Model> m = working_model(src, rp, rotation ? &*rotation : nullptr, o.method_opts);
  stage(o.rotate ? "F32 working copies + rotation" : "F32 working copies");

  // --from: a saved stage-1 result, in the same basis as this run.
  std::optional<TensorSet> from;
  if (!o.from.empty()) {
    from = open_model(o.from);
    if (read_hadamard(from->meta, o.from).empty() == o.rotate)
      fail(o.from, "the stage-1 result was made ", o.rotate ? "without" : "with",
           " a Hadamard rotation and this run ", o.rotate ? "rotates" : "does not", ": start from a result in the same basis");
  }

  // Quantized tensors by name; deque: LayerWeights point into it and it only grows.
  std::deque<Tensor> quantized;
  std::map<std::string, const Tensor*> by_name;
  std::map<std::string, std::vector<Tensor>> residual_tensors;  // by base name: written after it
  // Quantizes the block-l weights that read `input` (a statistics key: calib::input_key), or all
  // of them when `input` is empty.
  auto quantize_block = [&](int64_t l, const std::string& input, const calib::Stats& stats) {
    for (const Tensor** slot : block_weights(m->layers[size_t(l)])) {
      const Tensor& w = **slot;
      if (!input.empty() && calib::input_key(w.name) != input) continue;
      const TensorPlan* tp = rp.find(w.name);
      const calib::InputStats* st = nullptr;
      if (auto it = stats.by_weight.find(calib::input_key(w.name)); it != stats.by_weight.end()) st = &it->second;
      WeightError err;
      std::optional<TernaryMatrix> start;
      if (from && is_ternary(tp->type)) {
        const Tensor* ft = from->find(w.name);
        if (!ft) fail(o.from, "no tensor '", w.name, "': a stage-1 result of another model or plan");
        start = stage1_from(*ft, w, o.from);
      }
      quantized.push_back(quantize_matrix(w, reinterpret_cast<const float*>(w.data), *tp, st, o.method_opts, m->file, &err, info,
                                          o.residual, &residual_tensors[w.name], start ? &*start : nullptr));
      res.errors.push_back(err);
      *slot = &quantized.back();
      by_name[w.name] = &quantized.back();
      // The forward that advances calibration past this block computes with its residual too.
      if (const auto& rt = residual_tensors[w.name]; !rt.empty()) {
        TensorSet linked;
        linked.path = "(quantized '" + w.name + "')";
        linked.add(quantized.back());
        for (const Tensor& t : rt) linked.add(t);
        ResidualView v;
        if (find_residual(linked, quantized.back(), &v)) m->residuals[&quantized.back()] = v;
      }
    }
  };

  std::string source_sha;
  auto get_source_sha = [&] {
    if (source_sha.empty()) source_sha = source_sha256(o.source);
    return source_sha;
  };

  // Statistics: reused, measured (with per-block quantization), or not needed.
  nlohmann::ordered_json manifest;
  calib::Stats stats;
  std::error_code ec;
  const bool need_stats = rp.needs_importance();
  bool reuse = !o.stats_path.empty() && fs::exists(o.stats_path, ec);
  // A resumed job that saves --stats may have saved them before it was killed (during the final
  // write): that file is its own output, not an input to reuse.
  if (const auto* saved = ck ? ck->saved_job() : nullptr; saved && saved->contains("stats") &&
                                                          (*saved)["stats"].is_object() &&
                                                          (*saved)["stats"].value("mode", "") == "save")
    reuse = false;
  const bool calibrate = need_stats && !reuse;
  std::vector<std::string> calib_files;
  std::string calib_sha;
  if (calibrate) {
    calib_files = o.calib_files.empty() ? default_calib_files() : o.calib_files;
    if (calib_files.empty())
      throw Error("no calibration text: pass --calib FILE... (the plan's methods optimal/gptq/tune need statistics)");
    calib_sha = sha256_files(calib_files);
  }

  // The checkpoint: what this job is (everything its bytes depend on; not the thread count, which
  // changes nothing), then the blocks a killed run of the same job finished.
  const int64_t n_layer = cfg.n_layer;
  const bool keep_stats = calibrate && !o.stats_path.empty();  // saved at the end: kept per block
  int64_t done = 0;
  std::deque<TensorSet> restored;  // finished blocks read back; `quantized` points into them
  double checkpoint_seconds = 0;
  if (ck) {
    nlohmann::ordered_json job;
    job["source"] = o.source;
    job["source_sha256"] = get_source_sha();
    job["plan"] = nlohmann::ordered_json::parse(rp.json());
    job["rotation"] = rotation_json(o);
    job["seed"] = o.seed;
    job["method_options"] = {{"gptq_passes", o.method_opts.gptq_passes}, {"gptq_descent", o.method_opts.descent_rounds},
                             {"tune_steps", o.method_opts.tune_steps},
                             {"tune_lr", o.method_opts.tune_lr}};
    job["residual"] = {{"kind", residual_kind_name(o.residual.kind)}, {"dim", o.residual.dim},
                       {"size", o.residual.size}, {"rows", o.residual.rows}};
    job["from"] = o.from.empty() ? nlohmann::ordered_json(nullptr)
                                 : nlohmann::ordered_json{{"path", o.from}, {"sha256", sha256_files({o.from})}};
    if (o.stats_path.empty()) job["stats"] = nullptr;
    else if (reuse) job["stats"] = {{"path", o.stats_path}, {"mode", "reuse"}, {"sha256", sha256_files({o.stats_path})}};
    else job["stats"] = {{"path", o.stats_path}, {"mode", calibrate ? "save" : "unused"}};
    job["calibration"] = calibrate ? nlohmann::ordered_json{{"files", calib_files}, {"sha256", calib_sha},
                                                            {"windows", o.calib_windows}, {"len", o.calib_len},
                                                            {"gram", rp.needs_gram()}}
                                   : nlohmann::ordered_json(nullptr);
    done = ck->begin(job, o.output);
    if (done > n_layer) fail(ck->dir(), "records ", done, " finished blocks, the model has ", n_layer);
    if (done > 0) info(cat("resuming from ", ck->dir(), ": ", done, " of ", n_layer, " blocks already done"));
    for (int64_t l = 0; l < done; ++l) {
      nlohmann::ordered_json errs;
      restored.push_back(ck->load_block(l, &errs));
      const TensorSet& ts = restored.back();
      std::vector<const Tensor**> slots = block_weights(m->layers[size_t(l)]);
      if (!errs.is_array() || errs.size() != slots.size())
        fail(ts.path, "holds errors for ", errs.size(), " weights, block ", l, " has ", slots.size());
      for (size_t i = 0; i < slots.size(); ++i) {
        const Tensor& w = **slots[i];
        const Tensor& q = ts.get(w.name);
        if (q.ne != w.ne || q.type != rp.find(w.name)->type)
          fail(ts.path, "'", w.name, "' is ", traits(q.type).name, " ", q.shape_str(), ", the plan makes ",
               traits(rp.find(w.name)->type).name, " ", w.shape_str());
        WeightError e = weight_error_from(errs[i], ts.path);
        if (e.name != w.name) fail(ts.path, "errors are listed for '", e.name, "' where '", w.name, "' is expected");
        res.errors.push_back(std::move(e));
        quantized.push_back(q);
        *slots[i] = &quantized.back();
        by_name[w.name] = &quantized.back();
        auto& rt = residual_tensors[w.name];
        for (const auto& rn : errs[i].value("residual_tensors", nlohmann::ordered_json::array()))
          rt.push_back(ts.get(rn.get<std::string>()));
      }
    }
  }
  // After block l: its tensors, errors, statistics (when kept) and the hidden states after it.
  auto checkpoint_block = [&](int64_t l, const calib::Stats* all, const std::vector<float>* hidden) {
    if (!ck) return;
    const auto c0 = Clock::now();
    BlockCheckpoint b;
    b.errors = nlohmann::ordered_json::array();
    calib::Stats block_stats;
    const std::vector<const Tensor**> slots = block_weights(m->layers[size_t(l)]);
    for (size_t i = 0; i < slots.size(); ++i) {
      const std::string& name = (*slots[i])->name;
      nlohmann::ordered_json j = checkpoint_json(res.errors[res.errors.size() - slots.size() + i]);
      b.tensors.push_back(*by_name.at(name));
      nlohmann::ordered_json rnames = nlohmann::ordered_json::array();
      for (const Tensor& r : residual_tensors[name]) {
        b.tensors.push_back(r);
        rnames.push_back(r.name);
      }
      j["residual_tensors"] = rnames;
      b.errors.push_back(j);
      if (keep_stats && all)
        if (auto it = all->by_weight.find(calib::input_key(name)); it != all->by_weight.end())
          block_stats.by_weight[it->first] = it->second;
    }
    if (keep_stats) b.stats = &block_stats;
    if (l + 1 < n_layer) b.hidden = hidden;
    ck->save_block(l, b);
    checkpoint_seconds += since(c0);
  };

  if (reuse) {
    stats = calib::load_stats(o.stats_path);
    res.stats_loaded = true;
    try {
      manifest = nlohmann::ordered_json::parse(stats.manifest_json);
    } catch (const nlohmann::json::exception& e) {
      fail(o.stats_path, "bonsai.calib.manifest is not JSON: ", e.what());
    }
    const auto want_rot = rotation_json(o);
    const auto have_rot = manifest.contains("rotation") ? manifest["rotation"] : nlohmann::ordered_json(nullptr);
    if (want_rot != have_rot)
      fail(o.stats_path, "the statistics were measured with rotation ", have_rot.dump(), ", this run uses ", want_rot.dump(),
           ": statistics are only valid in the basis they were measured in");
    if (manifest.contains("source_sha256") && manifest["source_sha256"] != get_source_sha())
      info(cat("warning: ", o.stats_path, " was measured on another source file (sha256 ",
               manifest["source_sha256"].get<std::string>(), ")"));
    for (const auto& t : rp.tensors) {
      if (t.block < 0 || t.ne.size() < 2) continue;
      const auto it = stats.by_weight.find(calib::input_key(t.name));
      if (it == stats.by_weight.end()) fail(o.stats_path, "no statistics for the input of '", t.name, "'");
      if (it->second.cols != t.ne[0])
        fail(o.stats_path, "statistics for '", it->first, "' have ", it->second.cols, " columns, '", t.name, "' reads ",
             t.ne[0]);
      if (t.method && method_needs_gram(*t.method) && it->second.gram.empty())
        fail(o.stats_path, "no Gram matrix for '", it->first, "', which ", method_name(*t.method),
             " needs (measure again without this file)");
    }
    info(cat("statistics loaded from ", o.stats_path, ": no model forward"));
    stage("load statistics");
    for (int64_t l = done; l < n_layer; ++l) {
      quantize_block(l, "", stats);
      checkpoint_block(l, nullptr, nullptr);
    }
    stage("quantize");
  } else if (calibrate) {
    const std::vector<std::string>& files = calib_files;
    const auto tok = model_tokenizer(*m);
    const int32_t bos = tok->add_bos_default() ? tok->bos() : -1;
    // datasets/' rule (window_sampler.h): deterministic from the seed, evaluation text refused.
    datasets::SampledWindows sampled =
        datasets::sample_windows(*tok, files, size_t(o.calib_windows), size_t(o.calib_len), o.seed);
    if (bos >= 0) sampled.begin_each_with(bos);
    const std::vector<int32_t>& windows = sampled.ids;
    info(cat("calibration: ", files.size(), " files, ", sampled.total_tokens, " tokens; ", o.calib_windows, " windows of ",
             o.calib_len, " tokens", rp.needs_gram() ? ", with Gram matrices" : ""));
    stage("tokenize calibration text");
    manifest["source"] = o.source;
    manifest["source_sha256"] = get_source_sha();
    manifest["calib_files"] = files;
    manifest["calib_sha256"] = calib_sha;
    manifest["corpus_tokens"] = sampled.total_tokens;
    manifest["windows"] = o.calib_windows;
    manifest["window_len"] = o.calib_len;
    manifest["sampler"] = "datasets/window_sampler.h (mt19937_64, uniform starts)";
    manifest["seed"] = o.seed;
    manifest["bos"] = bos;
    manifest["rotation"] = rotation_json(o);
    manifest["gram"] = rp.needs_gram();
    manifest["plan"] = rp.plan_name;
    manifest["sequential"] = "each block measured on the outputs of the blocks already quantized";
    calib::CalibrateOptions co;
    co.gram = rp.needs_gram();
    co.keep_gram = keep_stats;  // no statistics file: one block's Gram matrices in memory at a time
    // Resuming: the hidden states after the last finished block, and (when they are saved at the
    // end) the statistics of the finished blocks; no forward runs for those blocks.
    std::vector<float> hidden;
    calib::Stats prior;
    co.first_block = done;
    if (done > 0) {
      if (done < n_layer) hidden = ck->load_hidden(done - 1, uint64_t(o.calib_windows * o.calib_len * cfg.n_embd));
      if (keep_stats)
        for (int64_t l = 0; l < done; ++l)
          for (auto& [k, v] : ck->load_stats(l).by_weight) prior.by_weight[k] = std::move(v);
      co.resume_hidden = &hidden;
      co.resume_stats = &prior;
    }
    co.checkpoint = [&](int64_t l, const std::vector<float>& h, const calib::Stats& all) { checkpoint_block(l, &all, &h); };
    calib::CalibrateTimes ct;
    stats = calib::calibrate_blocks(*m, windows, o.calib_windows, o.calib_len, co, quantize_block, ev.block_done, &ct);
    stats.manifest_json = manifest.dump();
    res.calibrated = true;
    res.calib_tokens = o.calib_windows * o.calib_len;
    res.stages.push_back({"calibrate: embed", ct.embed, peak_rss_bytes()});
    res.stages.push_back({"calibrate: forward", ct.forward, peak_rss_bytes()});
    res.stages.push_back({"calibrate: statistics", ct.collect, peak_rss_bytes()});
    res.stages.push_back({"calibrate: quantize", ct.quantize, peak_rss_bytes()});
    t0 = Clock::now();
    if (!o.stats_path.empty()) {
      calib::save_stats(o.stats_path, stats);
      info(cat("statistics saved to ", o.stats_path));
      stage("save statistics");
    }
  } else {
    for (int64_t l = done; l < n_layer; ++l) {
      quantize_block(l, "", stats);
      checkpoint_block(l, nullptr, nullptr);
    }
    stage("quantize");
  }
  if (ck) res.stages.push_back({"checkpoints", checkpoint_seconds, peak_rss_bytes()});

  // Output: the source's metadata and the tensors in the source's order.
  Metadata meta = src.meta;
  // A .bonsai source's own plan, provenance and dates describe how the source was made, not this file.
  std::vector<std::string> stale;
  for (const auto& [k, v] : meta.items())
    if (k.starts_with("bonsai.")) stale.push_back(k);
  for (const auto& k : stale) meta.erase(k);
  meta.set_u32("general.file_type", llama_file_type(rp.dominant_block_type()));
  meta.set_u32("general.quantization_version", 2);
  if (rotation) write_hadamard(*rotation, meta);
  if (o.residual.kind != ResidualKind::none) write_residual_keys(o.residual, meta);
  std::vector<Tensor> out;
  for (const Tensor& t : m->file.tensors) {
    if (auto it = by_name.find(t.name); it != by_name.end()) {
      out.push_back(*it->second);
      for (const Tensor& r : residual_tensors[t.name]) out.push_back(r);
    } else if (t.ne.size() < 2 && t.type != TypeId::F32) out.push_back(convert_tensor(t, TypeId::F32, m->file));
    else out.push_back(t);
  }
  if (o.output.ends_with(".bonsai")) {
    meta.set_str("bonsai.plan", rp.json());
    meta.set_str("bonsai.provenance.source", o.source);
    meta.set_str("bonsai.provenance.source_sha256", get_source_sha());
    if (manifest.contains("calib_sha256")) meta.set_str("bonsai.provenance.calib_sha256", manifest["calib_sha256"]);
    if (!manifest.empty()) meta.set_str("bonsai.calib.manifest", manifest.dump());
    nlohmann::ordered_json errs = nlohmann::ordered_json::object();
    for (const auto& e : res.errors) {
      nlohmann::ordered_json j;
      j["type"] = traits(e.type).name;
      if (e.method) j["method"] = method_name(*e.method);
      j["rel_output_error"] = e.rel_error;
      if (e.stage1_error) j["stage1_rel_output_error"] = *e.stage1_error, j["plus2_share"] = e.plus2_share;
      if (e.grid_error) j["grid_rel_output_error"] = *e.grid_error, j["residual_bytes"] = e.residual_bytes;
      j["measure"] = e.gram ? "gram" : "importance";
      errs[e.name] = j;
    }
    meta.set_str("bonsai.quant.layer_errors", errs.dump());
  }
  write_model(o.output, meta, out);
  res.file_bytes = fs::file_size(o.output, ec);
  stage("write");
  res.peak_rss_bytes = peak_rss_bytes();
  return res;
}

}  // namespace

QuantizeResult quantize_model(const QuantizeOptions& o, const QuantizeEvents& ev) {
  if (!o.dry_run && !o.output.ends_with(".gguf") && !o.output.ends_with(".bonsai"))
    fail(o.output, "output must end in .gguf or .bonsai");
  validate_method_options(o.method_opts);  // now, not after a calibration forward
  if (o.dry_run || !o.checkpoint) return run_quantize(o, ev, nullptr);
  // Made before any work, so an output folder that cannot be written fails now, not hours later.
  JobCheckpoint ck(o.output, o.partial);
  QuantizeResult res;
  try {
    res = run_quantize(o, ev, &ck);
  } catch (const Error& e) {
    if (ck.abandon())
      throw Error(cat(e.what(), "\n", ck.blocks_done(), " finished blocks are kept in ", ck.dir(),
                      ": once the cause is fixed, rerun with --resume to continue from there"));
    throw;
  } catch (...) {
    ck.abandon();
    throw;
  }
  ck.finish();
  return res;
}

}  // namespace bonsai::quant
