#include "mixed/sensitivity.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "datasets/window_sampler.h"
#include "formats/byte_size.h"
#include "formats/error.h"
#include "formats/model_file.h"
#include "formats/text_file.h"
#include "quantize/pipeline.h"
#include "quantize/provenance.h"
#include "runtime/kld.h"
#include "runtime/load.h"

namespace bonsai::mixed {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

constexpr const char* kFormat = "bonsai.sensitivity";
constexpr int kVersion = 1;

TypeId type_named(const std::string& s, const std::string& source) {
  const TypeTraits* t = find_type(s);
  if (!t) fail(source, "unknown type '", s, "'");
  return t->id;
}

}  // namespace

int64_t TensorSensitivity::elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

const TensorSensitivity* SensitivityTable::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

bool SensitivityTable::has(TypeId t) const { return std::find(types.begin(), types.end(), t) != types.end(); }

std::string tensor_kind(const std::string& name) {
  if (quant::block_index(name) < 0) return "";
  const size_t a = name.find('.', 4);
  const size_t b = name.rfind(".weight");
  if (a == std::string::npos || b == std::string::npos || b <= a + 1) return "";
  return name.substr(a + 1, b - a - 1);
}

std::vector<TypeId> parse_type_list(const std::string& s, const std::string& option) {
  std::vector<TypeId> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string name = s.substr(at, comma - at);
    const TypeTraits* t = find_type(name);
    if (!t || !quant::plan_type_allowed(t->id))
      throw Error(cat(option, " ", s, ": '", name, "' is not a type a plan may use (F32 F16 BF16 Q8_0 Q4_0 PQ2_0 PTQ1_0)"));
    if (std::find(out.begin(), out.end(), t->id) != out.end()) throw Error(cat(option, " ", s, ": '", name, "' twice"));
    out.push_back(t->id);
    at = comma + 1;
  }
  return out;
}

plot::Heatmap tensor_grid(const std::vector<TensorSensitivity>& tensors, const std::map<std::string, double>& value,
                          const std::string& title) {
  plot::Heatmap h;
  h.title = title;
  int64_t n_blocks = 0;
  for (const auto& e : tensors) {
    n_blocks = std::max(n_blocks, e.block + 1);
    if (std::find(h.cols.begin(), h.cols.end(), e.kind) == h.cols.end()) h.cols.push_back(e.kind);
  }
  for (int64_t b = 0; b < n_blocks; ++b) h.rows.push_back(cat("blk.", b));
  h.values.assign(h.rows.size() * h.cols.size(), std::nan(""));
  for (const auto& e : tensors) {
    const auto it = value.find(e.name);
    if (it == value.end() || e.block < 0) continue;
    const size_t c = size_t(std::find(h.cols.begin(), h.cols.end(), e.kind) - h.cols.begin());
    h.values[size_t(e.block) * h.cols.size() + c] = it->second;
  }
  return h;
}

plot::HeatmapFigure sensitivity_heatmap(const SensitivityTable& t, const std::vector<TypeId>& types) {
  plot::HeatmapFigure f;
  f.title = cat("KLD against the unquantized model when one tensor takes the type (", t.positions,
                " calibration positions, ", t.method, ")");
  f.value_label = "mean KLD";
  for (TypeId ty : types) {
    std::map<std::string, double> v;
    for (const auto& e : t.tensors)
      if (auto it = e.kld.find(ty); it != e.kld.end()) v[e.name] = it->second;
    f.panels.push_back(tensor_grid(t.tensors, v, traits(ty).name));
  }
  return f;
}

ordered_json to_json(const SensitivityTable& t) {
  ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["key"] = t.key;
  j["info"] = t.info;
  j["method"] = t.method;
  j["positions"] = t.positions;
  j["base_rest_mass_mean"] = t.base_rest_mass;
  j["types"] = ordered_json::array();
  for (TypeId ty : t.types) j["types"].push_back(traits(ty).name);
  j["tensors"] = ordered_json::array();
  for (const auto& e : t.tensors) {
    ordered_json x;
    x["name"] = e.name;
    x["block"] = e.block;
    x["kind"] = e.kind;
    x["ne"] = e.ne;
    for (const char* field : {"kld", "kld_err", "bytes"}) x[field] = ordered_json::object();
    for (TypeId ty : t.types) {
      if (auto it = e.kld.find(ty); it != e.kld.end()) x["kld"][traits(ty).name] = it->second;
      if (auto it = e.kld_err.find(ty); it != e.kld_err.end()) x["kld_err"][traits(ty).name] = it->second;
      if (auto it = e.bytes.find(ty); it != e.bytes.end()) x["bytes"][traits(ty).name] = it->second;
    }
    j["tensors"].push_back(x);
  }
  return j;
}

SensitivityTable sensitivity_from_json(const nlohmann::json& j, const std::string& source) {
  SensitivityTable t;
  try {
    if (!j.is_object() || j.value("format", "") != kFormat)
      fail(source, "is not a sensitivity table (no \"format\": \"", kFormat, "\")");
    if (j.at("version").get<int>() != kVersion)
      fail(source, "sensitivity table version ", j.at("version").dump(), "; this bonsai reads ", kVersion);
    t.key = j.at("key");
    if (j.contains("info")) t.info = j.at("info");
    t.method = j.at("method").get<std::string>();
    t.positions = j.at("positions").get<int64_t>();
    t.base_rest_mass = j.value("base_rest_mass_mean", 0.0);
    for (const auto& s : j.at("types")) t.types.push_back(type_named(s.get<std::string>(), source));
    for (const auto& x : j.at("tensors")) {
      TensorSensitivity e;
      e.name = x.at("name").get<std::string>();
      e.block = x.at("block").get<int64_t>();
      e.kind = x.at("kind").get<std::string>();
      e.ne = x.at("ne").get<std::vector<int64_t>>();
      if (e.ne.empty() || e.ne.size() > 4) fail(source, "tensor '", e.name, "' has ", e.ne.size(), " dimensions");
      for (int64_t d : e.ne)
        if (d <= 0) fail(source, "tensor '", e.name, "' has a dimension of ", d);
      for (const auto& [k, v] : x.at("kld").items()) {
        const double d = v.get<double>();
        if (!std::isfinite(d) || d < 0) fail(source, "tensor '", e.name, "': KLD for ", k, " is ", v.dump());
        e.kld[type_named(k, source)] = d;
      }
      if (x.contains("kld_err"))
        for (const auto& [k, v] : x.at("kld_err").items()) e.kld_err[type_named(k, source)] = v.get<double>();
      for (const auto& [k, v] : x.at("bytes").items()) e.bytes[type_named(k, source)] = v.get<uint64_t>();
      for (TypeId ty : t.types)
        if (!e.kld.count(ty) || !e.bytes.count(ty))
          fail(source, "tensor '", e.name, "' has no KLD or size for ", traits(ty).name, ", which \"types\" lists");
      t.tensors.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    fail(source, "malformed sensitivity table: ", e.what());
  }
  return t;
}

SensitivityTable read_sensitivity(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, "is not JSON: ", e.what());
  }
  return sensitivity_from_json(j, path);
}

void write_sensitivity(const std::string& path, const SensitivityTable& t) {
  write_text_file(path, to_json(t).dump(1) + "\n");
}

ordered_json sensitivity_key(const std::string& model_sha256, const std::string& stats_sha256,
                             const std::string& calib_sha256, const SensitivityOptions& o, const std::string& method) {
  ordered_json k;
  k["model_sha256"] = model_sha256;
  k["stats_sha256"] = stats_sha256;
  k["calib_sha256"] = calib_sha256;
  k["chunks"] = o.chunks;
  k["ctx"] = o.ctx;
  k["seed"] = o.seed;
  k["kl_top_k"] = o.top_k;
  k["method"] = method;
  return k;
}

std::optional<SensitivityTable> load_cached(const std::string& path, const ordered_json& key, std::string* why) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return std::nullopt;
  SensitivityTable t = read_sensitivity(path);
  // Compared as unordered maps: the file was read back with its keys in another order.
  if (nlohmann::json(t.key) != nlohmann::json(key)) {
    if (why) {
      std::string diff;
      for (const auto& [k, v] : key.items())
        if (!t.key.contains(k) || t.key[k] != v) diff += (diff.empty() ? "" : ", ") + k;
      *why = cat(path, " was measured with another ", diff.empty() ? "key" : diff, ": measuring again");
    }
    return std::nullopt;
  }
  return t;
}

SensitivityTable measure_sensitivity(const SensitivityOptions& o, const SensitivityEvents& ev) {
  auto info = [&](const std::string& s) {
    if (ev.info) ev.info(s);
  };
  if (o.types.empty()) throw Error("sensitivity: no candidate types");
  for (TypeId ty : o.types)
    if (!quant::plan_type_allowed(ty)) throw Error(cat("sensitivity: ", traits(ty).name, " is not a type a plan may use"));
  if (o.chunks < 2) throw Error(cat("sensitivity: --chunks ", o.chunks, ": at least 2 (the perplexity chunking needs two)"));
  std::error_code ec;
  if (!fs::is_regular_file(o.stats, ec))
    fail(o.stats, "no statistics file: measure one first (bonsai quantize --stats FILE ...); sensitivity reuses it, "
         "so every candidate is quantized from the same statistics");
  const std::vector<std::string> files = o.calib_files.empty() ? quant::default_calib_files() : o.calib_files;
  if (files.empty()) throw Error("no calibration text: pass --calib FILE... (sensitivity is measured on calibration text)");
  const std::string method = quant::method_name(o.method.value_or(quant::kDefaultMethod));
  info("hashing the model, statistics and calibration text for the cache key");
  const ordered_json key = sensitivity_key(quant::source_sha256(o.model), quant::sha256_files({o.stats}),
                                           quant::sha256_files(files), o, method);
  SensitivityTable t;
  std::string why;
  if (auto c = load_cached(o.cache, key, &why)) {
    t = std::move(*c);
    info(cat("cache ", o.cache, ": same model, statistics and chunks; ", t.types.size(), " type(s) already measured"));
  } else {
    if (!why.empty()) info(why);
    t.key = key;
    t.method = method;
  }
  t.info = {{"model", o.model}, {"stats", o.stats}, {"calib_files", files}, {"device", o.device}};
  std::vector<TypeId> missing;
  for (TypeId ty : o.types)
    if (!t.has(ty)) missing.push_back(ty);
  if (missing.empty()) return t;

  // The unquantized model and its distributions on the calibration chunks.
  auto backend = make_backend(o.device, o.threads);
  auto model = load_model(o.model);
  const auto tok = model_tokenizer(*model);
  const datasets::SampledWindows chunks =
      datasets::sample_windows(*tok, files, size_t(o.chunks), size_t(o.ctx), o.seed);
  PerplexityOptions po;
  po.n_ctx = o.ctx;
  po.max_chunks = o.chunks;
  po.add_bos = tok->add_bos_default();
  po.bos = tok->bos();
  const std::string chunk_name = cat("calibration chunks (", o.chunks, " x ", o.ctx, " tokens, seed ", o.seed, ")");
  KldHeader kh;
  kh.n_vocab = model->cfg.n_vocab, kh.n_ctx = o.ctx, kh.k = o.top_k, kh.tokens_hash = hash_tokens(chunks.ids);
  // In memory: every comparison reads it (o.chunks x ctx/2 positions; 300 KB each for a 152k
  // vocabulary in the every-token layout), said before the base run.
  info(cat("base distributions: ", human_bytes(kld_base_bytes(kh, o.chunks, -1)), " in memory (",
           o.top_k ? cat("top ", o.top_k) : std::string("every token, 16 bits"), ")"));
  KldRecorder rec(kh, "");
  const KldRun base_run = perplexity_kld(*model, *backend, chunks.ids, po, chunk_name, &rec, -1, nullptr);
  const KldBase base = rec.finish(base_run.ppl.chunks, base_run.ppl.chunks);
  t.positions = base_run.ppl.tokens_scored;
  t.base_rest_mass = base.mean_rest_mass();
  info(cat("base: ", chunk_name, ", ", t.positions, " scored positions, perplexity ", base_run.ppl.ppl,
           o.top_k ? cat("; mean mass outside the top ", o.top_k, ": ", t.base_rest_mass) : "; every token kept"));
  if (t.tensors.empty())
    for (auto& layer : model->layers)
      for (const Tensor** slot : layer.slots()) {
        TensorSensitivity e;
        e.name = (*slot)->name;
        e.kind = tensor_kind(e.name);
        e.block = quant::block_index(e.name);
        e.ne = (*slot)->ne;
        t.tensors.push_back(std::move(e));
      }

  const std::string dir = o.work_dir.empty() ? fs::temp_directory_path().string() : o.work_dir;
  const int64_t total = int64_t(missing.size() * t.tensors.size());
  int64_t done = 0;
  for (TypeId ty : missing) {
    // Every block matrix in this type, quantized by the pipeline from the statistics file.
    const std::string stem = (fs::path(dir) / cat("sensitivity-", traits(ty).name)).string();
    write_text_file(stem + ".yaml", cat("name: sensitivity-", traits(ty).name,
                                        "\ndescription: every block matrix in one type; the rest as stored\n",
                                        "default: BF16\nrules:\n  - match: '^blk\\.'\n    type: ", traits(ty).name, "\n"));
    quant::QuantizeOptions qo;
    qo.source = o.model;
    qo.output = stem + ".gguf";
    qo.plan = stem + ".yaml";
    qo.method = o.method;
    qo.stats_path = o.stats;
    qo.device = o.device;  // gptq's numerics where the KL runs are
    qo.calib_files = files;
    quant::QuantizeEvents qe;
    qe.info = [&](const std::string& s) {
      if (s.starts_with("statistics") || s.starts_with("warning") || s.starts_with("note")) info(s);
    };
    info(cat(traits(ty).name, ": quantizing every block matrix (", method, " for ternary types) from ", o.stats));
    const quant::QuantizeResult qr = quant::quantize_model(qo, qe);
    if (!qr.stats_loaded && quant::is_ternary(ty)) throw Error(cat(o.stats, ": statistics were not reused"));
    const TensorSet q = open_model(qo.output);
    for (auto& layer : model->layers)
      for (const Tensor** slot : layer.slots()) {
        const Tensor* qt = q.find((*slot)->name);
        if (!qt || qt->type != ty) fail(qo.output, "no ", traits(ty).name, " tensor '", (*slot)->name, "'");
        const Tensor* keep = *slot;
        *slot = qt;
        KldRun r;
        try {
          r = perplexity_kld(*model, *backend, chunks.ids, po, chunk_name, nullptr, 0, &base);
        } catch (...) {
          *slot = keep;
          throw;
        }
        *slot = keep;
        auto* e = const_cast<TensorSensitivity*>(t.find(qt->name));
        if (!e) fail(o.cache, "has no entry for '", qt->name, "'");
        e->kld[ty] = std::max(0.0, r.kld.mean);
        e->kld_err[ty] = r.kld.mean_err;
        e->bytes[ty] = qt->nbytes;
        if (ev.progress) ev.progress(++done, total);
      }
    t.types.push_back(ty);
    if (!o.cache.empty()) write_sensitivity(o.cache, t);
    fs::remove(qo.output, ec);
    fs::remove(stem + ".yaml", ec);
  }
  return t;
}

namespace {

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * double(i + j);
    i = j + 1;
  }
  return r;
}

}  // namespace

double rank_agreement(const SensitivityTable& a, const SensitivityTable& b, TypeId ty, const std::string& source) {
  std::vector<double> x, y;
  for (const TensorSensitivity& e : a.tensors) {
    const TensorSensitivity* f = b.find(e.name);
    if (!f || !e.kld.count(ty) || !f->kld.count(ty)) continue;
    x.push_back(e.kld.at(ty));
    y.push_back(f->kld.at(ty));
  }
  if (x.size() < 3) fail(source, "shares ", x.size(), " measured tensors of ", traits(ty).name, " with the other table (need 3)");
  const std::vector<double> rx = ranks(x), ry = ranks(y);
  const double n = double(x.size()), mean = (n - 1) / 2;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < rx.size(); ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 1.0;
}

}  // namespace bonsai::mixed
