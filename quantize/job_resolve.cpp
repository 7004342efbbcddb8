// Phase 1 of the quantize job (quantize/job.h): what the job is, before any work.
#include <algorithm>
#include <filesystem>

#include "formats/byte_size.h"
#include "formats/error.h"
#include "formats/model_file.h"
#include "quantize/job.h"
#include "quantize/provenance.h"
#include "quantize/rotate.h"
#include "quantize/tune.h"
#include "runtime/backend.h"
#include "runtime/bench.h"

#ifdef BONSAI_HAVE_QUANT_CUDA
#include "quantize/cuda/gptq_cuda.h"
#endif

namespace bonsai::quant {

namespace fs = std::filesystem;

nlohmann::ordered_json rotation_json(const QuantizeOptions& o) {
  if (!o.rotate) return nullptr;
  return {{"transform", "hadamard"}, {"block", o.rotate_block}, {"seed", o.seed}};
}

QuantizeJob::QuantizeJob(const QuantizeOptions& o, const QuantizeEvents& ev)
    : o_(o), ev_(ev), t0_(std::chrono::steady_clock::now()) {}

void QuantizeJob::info(const std::string& s) const {
  if (ev_.info) ev_.info(s);
}

void QuantizeJob::stage(const std::string& name) {
  const auto now = std::chrono::steady_clock::now();
  res_.stages.push_back({name, std::chrono::duration<double>(now - t0_).count(), peak_rss_bytes(), anon_.lap()});
  t0_ = now;
}

// The least free GPU memory so far: sampled while a block's session is alive (its checkpoint),
// and gptq's own lowest sample at its peaks.
void QuantizeJob::sample_device() {
#ifdef BONSAI_HAVE_QUANT_CUDA
  if (!mo_.gpu) return;
  int64_t f = quant::cuda::device_free_bytes();
  if (const int64_t g = quant::cuda::lowest_free_seen(); g >= 0) f = std::min(f, g);
  device_free_min_ = std::min(device_free_min_, f);
  res_.peak_device_bytes = device_free0_ - device_free_min_;
#endif
}

const std::string& QuantizeJob::source_sha() {
  if (source_sha_.empty()) source_sha_ = source_sha256(o_.source);
  return source_sha_;
}

// Source and plan, printed before any work; the rotation and the stage-1 result to start from.
void QuantizeJob::resolve() {
  src_ = open_model(o_.source);
  cfg_ = read_model_config(src_);
  Plan plan = load_plan(o_.plan);
  if (o_.ternary_type) set_ternary_type(plan, *o_.ternary_type);
  apply_overrides(plan, o_.overrides);
  res_.plan = resolve_plan(plan, src_.tensors, cfg_.n_layer, o_.method, kDefaultMethod);
  const ResolvedPlan& rp = res_.plan;
  // A build without LibTorch refuses tune before any work (not after calibrating).
  for (const auto& t : rp.tensors)
    if (t.method == Method::tune) require_torch();
  info(cat("plan ", rp.plan_name, " (", rp.plan_source, ") on ", o_.source, ":"));
  info(rp.table());
  mo_ = o_.method_opts;
  if (o_.device != "cpu") {
    // Now, before any work: a device that is not there is an Error naming it; this one becomes
    // the current device for gptq's numerics (the calibration's backends make it current too).
    const auto be = make_backend(o_.device, 0);
    info(cat("device: ", be->name()));
    mo_.gpu = true;
  }
  if (o_.rotate) {
    std::vector<std::pair<std::string, int64_t>> rotated;
    for (const auto& t : rp.tensors)
      if (t.block >= 0 && t.ne.size() >= 2) rotated.emplace_back(t.name, t.ne[0]);
    rotation_ = make_rotation(rotated, o_.rotate_block, o_.seed);
  }
  // --from: a saved stage-1 result, in the same basis as this run.
  if (!o_.from.empty()) {
    from_ = open_model(o_.from);
    if (read_hadamard(from_->meta, o_.from).empty() == o_.rotate)
      fail(o_.from, "the stage-1 result was made ", o_.rotate ? "without" : "with",
           " a Hadamard rotation and this run ", o_.rotate ? "rotates" : "does not", ": start from a result in the same basis");
  }
}

// Where the statistics come from: a file to reuse (checked against this run now, read a block at
// a time later), a calibration, or nowhere (the methods need none).
void QuantizeJob::resolve_statistics() {
  const ResolvedPlan& rp = res_.plan;
  std::error_code ec;
  bool reuse = !o_.stats_path.empty() && fs::exists(o_.stats_path, ec);
  // A resumed job that saves --stats may have saved them before it was killed (during the final
  // write): that file is its own output, not an input to reuse.
  if (const auto* saved = ck_ ? ck_->saved_job() : nullptr; saved && saved->contains("stats") &&
                                                              (*saved)["stats"].is_object() &&
                                                              (*saved)["stats"].value("mode", "") == "save")
    reuse = false;
  // A statistics file given is used even by a plan that needs none: the errors are then measured
  // in the output metric (with its Gram matrices), not weighted by nothing.
  stats_mode_ = reuse ? StatsMode::reuse : rp.needs_importance() ? StatsMode::calibrate : StatsMode::none;
  if (stats_mode_ == StatsMode::calibrate) {
    calib_files_ = o_.calib_files.empty() ? default_calib_files() : o_.calib_files;
    const char* missing = "no calibration text: pass --calib FILE... (the plan's methods optimal/gptq/tune need statistics)";
    if (calib_files_.empty() && !o_.dry_run) throw Error(missing);
    if (calib_files_.empty()) info(cat("note: ", missing));
    calib_sha_ = sha256_files(calib_files_);
    keep_stats_ = !o_.stats_path.empty();
  }
  if (stats_mode_ != StatsMode::reuse) return;
  stats_file_.emplace(o_.stats_path);
  nlohmann::ordered_json& manifest = manifest_;  // recorded by a .bonsai output as the run's
  try {
    manifest = nlohmann::ordered_json::parse(stats_file_->manifest_json());
  } catch (const nlohmann::json::exception& e) {
    fail(o_.stats_path, "bonsai.calib.manifest is not JSON: ", e.what());
  }
  const nlohmann::ordered_json want_rot = rotation_json(o_);
  const auto have_rot = manifest.contains("rotation") ? manifest["rotation"] : nlohmann::ordered_json(nullptr);
  if (want_rot != have_rot)
    fail(o_.stats_path, "the statistics were measured with rotation ", have_rot.dump(), ", this run uses ", want_rot.dump(),
         ": statistics are only valid in the basis they were measured in");
  if (manifest.contains("source_sha256") && manifest["source_sha256"] != source_sha())
    info(cat("warning: ", o_.stats_path, " was measured on another source file (sha256 ",
             manifest["source_sha256"].get<std::string>(), ")"));
  for (const auto& t : rp.tensors) {
    if (t.block < 0 || t.ne.size() < 2) continue;
    const std::string key = calib::input_key(t.name);
    const calib::InputStats* st = stats_file_->find(key);
    if (!st) fail(o_.stats_path, "no statistics for the input of '", t.name, "'");
    if (st->cols != t.ne[0])
      fail(o_.stats_path, "statistics for '", key, "' have ", st->cols, " columns, '", t.name, "' reads ", t.ne[0]);
    if (t.method && method_needs_gram(*t.method) && !stats_file_->has_gram(key))
      fail(o_.stats_path, "no Gram matrix for '", key, "', which ", method_name(*t.method),
           " needs (measure again without this file)");
  }
  res_.stats_loaded = true;
}

// What the job will hold in memory at its peak (memory_plan.h), printed; with `refuse`, an Error
// before any work when it cannot fit.
void QuantizeJob::plan_memory(bool refuse) {
  MemoryJob job;
  job.calibrate = stats_mode_ == StatsMode::calibrate;
  job.gram = res_.plan.needs_gram() && stats_mode_ != StatsMode::none;
  job.keep_stats = keep_stats_;
  job.windows = o_.calib_windows;
  job.len = o_.calib_len;
  job.residual = o_.residual.kind;
  need_ = predict_memory(cfg_, res_.plan, job);
  std::string source = "--max-memory";
  const uint64_t limit = o_.max_memory > 0 ? o_.max_memory : available_memory(&source);
  try {
    memory_ = place_memory(need_, limit, source);
  } catch (const Error& e) {
    if (refuse) throw;
    info(cat("this job would be refused: ", e.what()));
    return;
  }
  info(memory_table(need_, memory_, limit, source));
  res_.predicted_ram_bytes = memory_.ram_bytes;
  res_.spilled_bytes = memory_.spilled_bytes;
  if (!mo_.gpu) return;
  device_need_ = predict_device_memory(cfg_, res_.plan, job);
  uint64_t total = 0;
  for (const MemoryItem& i : device_need_) total += i.bytes;
  uint64_t free_bytes = 0;
#ifdef BONSAI_HAVE_QUANT_CUDA
  free_bytes = uint64_t(quant::cuda::device_free_bytes());
  device_free0_ = device_free_min_ = int64_t(free_bytes);
#endif
  std::string table = cat("GPU memory (", o_.device, "): ", human_bytes(double(total)), " at a block's peak, ",
                          human_bytes(double(free_bytes)), " free\n");
  for (const MemoryItem& i : device_need_) table += cat("  ", i.what, ": ", human_bytes(double(i.bytes)), "\n");
  info(table);
  res_.predicted_device_bytes = total;
  try {
    check_device_memory(device_need_, free_bytes, o_.device);
  } catch (const Error& e) {
    if (refuse) throw;
    info(cat("this job would be refused: ", e.what()));
  }
}

}  // namespace bonsai::quant
