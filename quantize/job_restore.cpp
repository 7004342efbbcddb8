// Phase 2 of the quantize job (quantize/job.h): the job's identity in its checkpoint, the
// matrices outside the blocks, the model calibration runs on, and the blocks a killed run of the
// same job finished.
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "formats/model_file.h"
#include "quantize/job.h"
#include "quantize/provenance.h"
#include "runtime/load.h"

namespace bonsai::quant {

// Everything the job's bytes depend on (not the thread count or the memory limit, which change
// nothing): a resumed job must match it exactly.
nlohmann::ordered_json QuantizeJob::identity() {
  const ResolvedPlan& rp = res_.plan;
  nlohmann::ordered_json job;
  job["source"] = o_.source;
  job["source_sha256"] = source_sha();
  job["plan"] = nlohmann::ordered_json::parse(rp.json());
  job["rotation"] = rotation_json(o_);
  job["seed"] = o_.seed;
  job["method_options"] = {{"gptq_passes", mo_.gptq_passes}, {"gptq_descent", mo_.descent_rounds},
                           {"tune_steps", mo_.tune_steps}, {"tune_lr", mo_.tune_lr}};
  // A GPU's results differ from the CPU's in float rounding: a job on one does not resume on the other.
  if (o_.device != "cpu") job["device"] = o_.device;
  job["residual"] = {{"kind", residual_kind_name(o_.residual.kind)}, {"dim", o_.residual.dim},
                     {"size", o_.residual.size}, {"rows", o_.residual.rows}};
  job["from"] = o_.from.empty() ? nlohmann::ordered_json(nullptr)
                                : nlohmann::ordered_json{{"path", o_.from}, {"sha256", sha256_files({o_.from})}};
  const bool calibrate = stats_mode_ == StatsMode::calibrate;
  if (o_.stats_path.empty()) job["stats"] = nullptr;
  else if (stats_mode_ == StatsMode::reuse)
    job["stats"] = {{"path", o_.stats_path}, {"mode", "reuse"}, {"sha256", sha256_files({o_.stats_path})}};
  else job["stats"] = {{"path", o_.stats_path}, {"mode", calibrate ? "save" : "unused"}};
  job["calibration"] = calibrate ? nlohmann::ordered_json{{"files", calib_files_}, {"sha256", calib_sha_},
                                                          {"windows", o_.calib_windows}, {"len", o_.calib_len},
                                                          {"gram", rp.needs_gram()}}
                                 : nlohmann::ordered_json(nullptr);
  return job;
}

// The matrices outside the blocks (embedding, head) in their plan types, made once and kept in
// the checkpoint: the calibration reads the embedding from there, the output copies them.
void QuantizeJob::make_outer() {
  if ((outer_ = ck_->load_outer())) return;
  TensorSet made;
  made.path = src_.path;
  for (const Tensor& t : src_.tensors) {
    const TensorPlan* tp = res_.plan.find(t.name);
    if (!tp) fail(src_.path, "tensor '", t.name, "' is not in the plan");
    if (t.ne.size() < 2 || tp->block >= 0 || tp->type == t.type) continue;
    if (is_ternary(tp->type)) {
      const std::vector<float> w = working_copy(t, nullptr);
      made.add(quantize_matrix(t, w.data(), *tp, nullptr, mo_, made, nullptr, {}));
    } else {
      made.add(convert_tensor(t, tp->type, made));
    }
    MappedFile::release(t.data, t.nbytes);  // read once: the source's pages may go
  }
  ck_->save_outer(made.tensors);
  outer_ = ck_->load_outer();
}

// The model the calibration forward runs: the outer matrices from the checkpoint, 1-D tensors
// and block weights as the source stores them. A block weight is decoded only when quantize_group
// comes to it, and its slot then points at its quantized tensor: the forward never computes with
// the source's bytes of a block it has not quantized.
void QuantizeJob::make_model() {
  TensorSet work;
  work.path = src_.path;
  work.format = src_.format;
  work.meta = src_.meta;
  for (const Tensor& t : src_.tensors) {
    const TensorPlan* tp = res_.plan.find(t.name);
    if (t.ne.size() >= 2 && tp->block < 0 && tp->type != t.type) work.add(outer_->get(t.name));
    else work.add(t);
  }
  m_ = load_model(std::move(work));
  if (rotation_) {
    if (!m_->hadamard.empty()) fail(src_.path, "the model is already rotated (prism.hadamard.*): do not rotate it again");
    m_->hadamard = *rotation_;
  }
}

void QuantizeJob::restore() {
  done_ = ck_->begin(identity(), o_.output);
  if (done_ > cfg_.n_layer) fail(ck_->dir(), "records ", done_, " finished blocks, the model has ", cfg_.n_layer);
  make_outer();
  make_model();
  if (done_ > 0) info(cat("resuming from ", ck_->dir(), ": ", done_, " of ", cfg_.n_layer, " blocks already done"));
  for (int64_t l = 0; l < done_; ++l) {
    nlohmann::ordered_json errs;
    finished_.push_back(ck_->load_block(l, &errs));
    adopt_block(l, finished_.back(), errs);
  }
  stage("restore: outer matrices, finished blocks");
}

// Block l's tensors and errors from its checkpoint file `ts` (mapped) become the job's: what a
// resumed job reads back and what a running one keeps of a block it has just finished.
void QuantizeJob::adopt_block(int64_t l, const TensorSet& ts, const nlohmann::ordered_json& errs) {
  const ResolvedPlan& rp = res_.plan;
  const auto slots = m_->layers[size_t(l)].slots();
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
    res_.errors.push_back(std::move(e));
    by_name_[w.name] = &q;
    auto& rt = residual_tensors_[w.name];
    rt.clear();
    for (const auto& rn : errs[i].value("residual_tensors", nlohmann::ordered_json::array()))
      rt.push_back(ts.get(rn.get<std::string>()));
    m_->residuals.erase(*slots[i]);  // a tensor of the block's work, about to be freed
    *slots[i] = &q;
  }
}

}  // namespace bonsai::quant
