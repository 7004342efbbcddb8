// quantize_model's work as a job in five phases, run in this order, each in a file of its own:
//   resolve     job_resolve.cpp  source, plan (printed), rotation, --from, where the statistics
//                                come from, and the memory the job needs (refused when too much)
//   restore     job_restore.cpp  the job's identity in OUT.partial/, the matrices outside the
//                                blocks, the model (block weights still the source's bytes), and
//                                the blocks a killed run finished, read back
//   statistics  job_blocks.cpp   reused from a file, measured block by block, or none needed...
//   blocks      job_blocks.cpp   ...and with them each block: its weights decoded one at a time,
//                                quantized, checkpointed, and then only its checkpoint file kept
//   write       job_write.cpp    the statistics file (when asked) and the output, both streamed
//                                from the checkpoint's files
// Everything the phases share is a member, so that each phase reads as one function.
#pragma once
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "calibrate/stats.h"
#include "quantize/checkpoint.h"
#include "quantize/matrix_quant.h"
#include "quantize/memory_plan.h"
#include "quantize/pipeline.h"
#include "runtime/anon_peak.h"

namespace bonsai::quant {

// The rotation as the statistics' manifest and the checkpoint record it (null: none).
nlohmann::ordered_json rotation_json(const QuantizeOptions& o);

class QuantizeJob {
 public:
  QuantizeJob(const QuantizeOptions& o, const QuantizeEvents& ev);
  QuantizeResult plan_only();               // --dry-run: the plan and the memory it would need
  QuantizeResult run(JobCheckpoint& ck);    // the five phases

 private:
  enum class StatsMode { none, reuse, calibrate };

  // 1. resolve
  void resolve();
  void resolve_statistics();
  void plan_memory(bool refuse);
  // 2. restore
  void restore();
  nlohmann::ordered_json identity();
  void make_outer();
  void make_model();
  // 3 + 4. statistics and blocks
  void blocks();
  void calibrate();
  void quantize_group(int64_t l, const std::string& input, calib::Stats& stats, bool take_gram);
  void finish_block(int64_t l, std::span<const float> hidden, calib::Stats* stats);
  void adopt_block(int64_t l, const TensorSet& ts, const nlohmann::ordered_json& errs);
  // 5. write
  void write();

  void stage(const std::string& name);
  void info(const std::string& s) const;
  const std::string& source_sha();

  const QuantizeOptions& o_;
  const QuantizeEvents& ev_;
  JobCheckpoint* ck_ = nullptr;
  QuantizeResult res_;
  AnonPeak anon_;
  std::chrono::steady_clock::time_point t0_;

  TensorSet src_;  // memory-mapped; the model's block weights point into it until quantized
  ModelConfig cfg_;
  std::optional<HadamardSpec> rotation_;
  std::optional<TensorSet> from_;  // --from
  MethodOptions mo_;               // the options' methods, with gptq on the GPU for --device cuda

  StatsMode stats_mode_ = StatsMode::none;
  bool keep_stats_ = false;  // measured statistics saved to --stats at the end (kept per block)
  std::optional<calib::StatsFile> stats_file_;  // reused statistics, read a block at a time
  std::vector<std::string> calib_files_;
  std::string calib_sha_, source_sha_;
  nlohmann::ordered_json manifest_;

  MemoryNeed need_;
  MemoryPlacement memory_;
  std::vector<MemoryItem> device_need_;  // --device cuda
  int64_t device_free0_ = -1, device_free_min_ = -1;  // free GPU memory at the start, and its least sample
  void sample_device();

  std::optional<TensorSet> outer_;  // embedding and head in their plan types (checkpoint file)
  std::unique_ptr<Model> m_;
  int64_t done_ = 0;  // finished blocks

  // The block being quantized: its tensors' bytes, residual tensors and errors, until its
  // checkpoint is written; then they are freed and the checkpoint file holds them.
  struct BlockWork {
    TensorSet owner;
    std::deque<Tensor> quantized;  // LayerWeights point into it while the block runs
    std::map<std::string, std::vector<Tensor>> residuals;
    std::vector<WeightError> errors;
  };
  BlockWork cur_;
  std::deque<TensorSet> finished_;  // the finished blocks' checkpoint files, mapped
  std::map<std::string, const Tensor*> by_name_;                  // quantized tensors, in finished_
  std::map<std::string, std::vector<Tensor>> residual_tensors_;   // by base name, in finished_
  double checkpoint_seconds_ = 0;
};

}  // namespace bonsai::quant
