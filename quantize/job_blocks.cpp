// Phases 3 and 4 of the quantize job (quantize/job.h): the statistics (reused, measured block by
// block, or none needed) and with them each block, quantized, checkpointed and freed.
#include <algorithm>
#include <chrono>
#include <filesystem>

#include "datasets/window_sampler.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "quantize/job.h"
#include "runtime/bench.h"
#include "runtime/load.h"

namespace bonsai::quant {

namespace fs = std::filesystem;

// Quantizes the block-l weights that read `input` (a statistics key: calib::input_key), or all of
// them when `input` is empty, into the block's work. Each weight is decoded (and rotated) only
// now, and the source's pages go once it is: the job holds one F32 matrix at a time. Weights
// reading one input share its moments, made once (`take_gram`: in the statistics' own storage).
void QuantizeJob::quantize_group(int64_t l, const std::string& input, calib::Stats& stats, bool take_gram) {
  std::map<std::string, InputMoments> moments;
  for (const Tensor** slot : m_->layers[size_t(l)].slots()) {
    const Tensor& w = **slot;
    const std::string key = calib::input_key(w.name);
    if (!input.empty() && key != input) continue;
    const TensorPlan* tp = res_.plan.find(w.name);
    const InputMoments* mom = nullptr;
    if (auto it = stats.by_weight.find(key); it != stats.by_weight.end()) {
      auto [m, made] = moments.try_emplace(key);
      if (made) m->second = input_moments(it->second, take_gram);
      mom = &m->second;
    }
    std::optional<TernaryMatrix> start;
    if (from_ && is_ternary(tp->type)) {
      const Tensor* ft = from_->find(w.name);
      if (!ft) fail(o_.from, "no tensor '", w.name, "': a stage-1 result of another model or plan");
      start = stage1_from(*ft, w, o_.from);
    }
    WeightError err;
    std::vector<Tensor>& rt = cur_.residuals[w.name];
    const std::vector<float> f32 = working_copy(w, rotation_ ? &*rotation_ : nullptr);
    MappedFile::release(w.data, w.nbytes);  // decoded: the source's pages may go
    cur_.quantized.push_back(quantize_matrix(w, f32.data(), *tp, mom, mo_, cur_.owner, &err,
                                             [this](const std::string& s) { info(s); }, o_.residual, &rt,
                                             start ? &*start : nullptr));
    cur_.errors.push_back(err);
    *slot = &cur_.quantized.back();
    // The forward that advances calibration past this block computes with its residual too.
    if (!rt.empty()) {
      TensorSet linked;
      linked.path = "(quantized '" + w.name + "')";
      linked.add(cur_.quantized.back());
      for (const Tensor& t : rt) linked.add(t);
      ResidualView v;
      if (find_residual(linked, cur_.quantized.back(), &v)) m_->residuals[&cur_.quantized.back()] = v;
    }
  }
}

// After block l: its tensors, errors, statistics (when kept) and the hidden states after it go
// to its checkpoint; the block's work is freed, and the checkpoint file, mapped, holds it now.
void QuantizeJob::finish_block(int64_t l, std::span<const float> hidden, calib::Stats* stats) {
  sample_device();
  const auto c0 = std::chrono::steady_clock::now();
  BlockCheckpoint b;
  b.errors = nlohmann::ordered_json::array();
  calib::Stats block_stats;
  const auto slots = m_->layers[size_t(l)].slots();
  if (cur_.errors.size() != slots.size())
    throw Error(cat("quantize: block ", l, " finished with ", cur_.errors.size(), " of its ", slots.size(), " weights"));
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::string& name = (*slots[i])->name;
    nlohmann::ordered_json j = checkpoint_json(cur_.errors[i]);
    b.tensors.push_back(**slots[i]);
    nlohmann::ordered_json rnames = nlohmann::ordered_json::array();
    for (const Tensor& r : cur_.residuals[name]) {
      b.tensors.push_back(r);
      rnames.push_back(r.name);
    }
    j["residual_tensors"] = rnames;
    b.errors.push_back(j);
    // Taken over: the runner drops a block's statistics after its checkpoint (KeepGram::block).
    if (keep_stats_ && stats && !block_stats.by_weight.count(calib::input_key(name)))
      if (auto it = stats->by_weight.find(calib::input_key(name)); it != stats->by_weight.end())
        block_stats.by_weight[it->first] = std::move(it->second);
  }
  if (keep_stats_) b.stats = &block_stats;
  if (l + 1 < cfg_.n_layer) b.hidden = hidden;
  ck_->save_block(l, b);
  nlohmann::ordered_json errs;
  finished_.push_back(ck_->load_block(l, &errs));
  adopt_block(l, finished_.back(), errs);
  cur_ = BlockWork{};
  checkpoint_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
}

// The blocks in order. Without a calibration, each block's statistics come from the file (its
// four inputs read in turn, each freed once its weights are quantized) or are not needed.
void QuantizeJob::blocks() {
  if (stats_mode_ == StatsMode::calibrate) return calibrate();
  if (stats_mode_ == StatsMode::reuse) {
    info(cat("statistics loaded from ", o_.stats_path, ": no model forward"));
    stage("load statistics");
  }
  const auto start = std::chrono::steady_clock::now();
  for (int64_t l = done_; l < cfg_.n_layer; ++l) {
    if (stats_mode_ == StatsMode::none) {
      calib::Stats none;
      quantize_group(l, "", none, true);
    } else {
      for (const Tensor* first : m_->layers[size_t(l)].group_inputs()) {
        const std::string key = calib::input_key(first->name);
        calib::Stats one;
        one.by_weight.emplace(key, stats_file_->load(key));
        quantize_group(l, key, one, true);
      }
    }
    finish_block(l, {}, nullptr);
    if (ev_.block_done)
      ev_.block_done({"quantize blocks", l, cfg_.n_layer,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), peak_rss_bytes()});
  }
  stage("quantize");
}

// Calibration in GPTQ's true-sequential order (calibrate/runner.h), each group quantized as soon
// as its input is measured.
void QuantizeJob::calibrate() {
  const auto tok = model_tokenizer(*m_);
  const int32_t bos = tok->add_bos_default() ? tok->bos() : -1;
  // datasets/' rule (window_sampler.h): deterministic from the seed, evaluation text refused.
  datasets::SampledWindows sampled =
      datasets::sample_windows(*tok, calib_files_, size_t(o_.calib_windows), size_t(o_.calib_len), o_.seed);
  if (bos >= 0) sampled.begin_each_with(bos);
  info(cat("calibration: ", calib_files_.size(), " files, ", sampled.total_tokens, " tokens; ", o_.calib_windows,
           " windows of ", o_.calib_len, " tokens", res_.plan.needs_gram() ? ", with Gram matrices" : ""));
  stage("tokenize calibration text");
  manifest_["source"] = o_.source;
  manifest_["source_sha256"] = source_sha();
  manifest_["calib_files"] = calib_files_;
  manifest_["calib_sha256"] = calib_sha_;
  manifest_["corpus_tokens"] = sampled.total_tokens;
  manifest_["windows"] = o_.calib_windows;
  manifest_["window_len"] = o_.calib_len;
  manifest_["sampler"] = "datasets/window_sampler.h (mt19937_64, uniform starts)";
  manifest_["seed"] = o_.seed;
  manifest_["bos"] = bos;
  manifest_["rotation"] = rotation_json(o_);
  manifest_["gram"] = res_.plan.needs_gram();
  manifest_["plan"] = res_.plan.plan_name;
  manifest_["sequential"] = "each block measured on the outputs of the blocks already quantized";

  calib::CalibrateOptions co;
  co.device = o_.device;
  co.gram = res_.plan.needs_gram();
  // Without a statistics file one Gram matrix at a time, taken over by the quantizer; with one,
  // a block's until its checkpoint has saved them.
  co.keep_gram = keep_stats_ ? calib::KeepGram::block : calib::KeepGram::group;
  co.first_block = done_;
  if (done_ > 0) co.resume_hidden = [&](float* h, size_t n) { ck_->load_hidden(done_ - 1, h, n); };
  int spills = 0;
  co.buffer = [&](const std::string& what, size_t n) {
    for (size_t k = 0; k < need_.buffers.size(); ++k)
      if (need_.buffers[k].what == what && k < memory_.spill.size() && memory_.spill[k])
        return SpillBuffer::spilled(n, (fs::path(ck_->dir()) / cat("spill-", spills++, ".f32")).string());
    return SpillBuffer::in_ram(n);
  };
  co.checkpoint = [&](int64_t l, std::span<const float> h, calib::Stats& all) { finish_block(l, h, &all); };
  const bool take = !keep_stats_;
  calib::CalibrateTimes ct;
  calib::calibrate_blocks(
      *m_, sampled.ids, o_.calib_windows, o_.calib_len, co,
      [&](int64_t l, const std::string& input, calib::Stats& all) { quantize_group(l, input, all, take); }, ev_.block_done,
      &ct);
  res_.calibrated = true;
  res_.calib_tokens = o_.calib_windows * o_.calib_len;
  const int64_t anon = anon_.lap();
  for (const auto& [name, s] : {std::pair<const char*, double>{"calibrate: embed", ct.embed},
                                {"calibrate: forward", ct.forward},
                                {"calibrate: statistics", ct.collect},
                                {"calibrate: quantize", ct.quantize}})
    res_.stages.push_back({name, s, peak_rss_bytes(), anon});
  t0_ = std::chrono::steady_clock::now();
}

}  // namespace bonsai::quant
