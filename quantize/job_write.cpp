// Phase 5 of the quantize job (quantize/job.h): the statistics file and the output, streamed
// from the checkpoint's files (write_model reads each tensor from its map and gives the pages
// back), so writing costs no more memory than the blocks did.
#include <filesystem>

#include "formats/error.h"
#include "formats/model_file.h"
#include "quantize/job.h"
#include "quantize/provenance.h"
#include "runtime/bench.h"

namespace bonsai::quant {

namespace fs = std::filesystem;

void QuantizeJob::write() {
  if (keep_stats_) {
    std::vector<std::string> parts;
    for (int64_t l = 0; l < cfg_.n_layer; ++l) parts.push_back(ck_->stats_file(l));
    calib::merge_stats(o_.stats_path, manifest_.dump(), parts);
    info(cat("statistics saved to ", o_.stats_path));
    stage("save statistics");
  }
  // The source's metadata and the tensors in the source's order.
  Metadata meta = src_.meta;
  // A .bonsai source's own plan, provenance and dates describe how the source was made, not this file.
  std::vector<std::string> stale;
  for (const auto& [k, v] : meta.items())
    if (k.starts_with("bonsai.")) stale.push_back(k);
  for (const auto& k : stale) meta.erase(k);
  meta.set_u32("general.file_type", llama_file_type(res_.plan.dominant_block_type()));
  meta.set_u32("general.quantization_version", 2);
  if (rotation_) write_hadamard(*rotation_, meta);
  if (o_.residual.kind != ResidualKind::none) write_residual_keys(o_.residual, meta);
  TensorSet norms;  // 1-D tensors converted to F32
  norms.path = src_.path;
  std::vector<Tensor> out;
  for (const Tensor& t : m_->file.tensors) {
    if (auto it = by_name_.find(t.name); it != by_name_.end()) {
      out.push_back(*it->second);
      for (const Tensor& r : residual_tensors_[t.name]) out.push_back(r);
    } else if (t.ne.size() < 2 && t.type != TypeId::F32) {
      out.push_back(convert_tensor(t, TypeId::F32, norms));
    } else {
      out.push_back(t);
    }
  }
  if (o_.output.ends_with(".bonsai")) {
    meta.set_str("bonsai.plan", res_.plan.json());
    meta.set_str("bonsai.provenance.source", o_.source);
    meta.set_str("bonsai.provenance.source_sha256", source_sha());
    if (manifest_.contains("calib_sha256")) meta.set_str("bonsai.provenance.calib_sha256", manifest_["calib_sha256"]);
    if (!manifest_.empty()) meta.set_str("bonsai.calib.manifest", manifest_.dump());
    meta.set_str("bonsai.quant.layer_errors", layer_errors_json(res_.errors));
  }
  write_model(o_.output, meta, out);
  std::error_code ec;
  res_.file_bytes = fs::file_size(o_.output, ec);
  stage("write");
}

QuantizeResult QuantizeJob::plan_only() {
  resolve();
  resolve_statistics();
  plan_memory(false);
  return res_;
}

QuantizeResult QuantizeJob::run(JobCheckpoint& ck) {
  ck_ = &ck;
  resolve();
  resolve_statistics();
  plan_memory(true);
  stage("open source and plan");
  restore();
  blocks();
  res_.stages.push_back({"checkpoints", checkpoint_seconds_, peak_rss_bytes(), 0});
  write();
  res_.peak_rss_bytes = peak_rss_bytes();
  res_.peak_anon_bytes = anon_.overall();
  return res_;
}

}  // namespace bonsai::quant
