// Crash-safe quantization jobs (docs/reliability.md, "Crash-safe jobs"). A job writing OUT keeps
// its finished work in the folder OUT.partial/, one block at a time:
//   state.json       which job this is (inputs, options, seed: `job`), how many blocks are done,
//                    and every file below with its size and XXH3-64 checksum;
//   block-LLL.gguf   block L's quantized tensors (and their residual tensors), its weights' errors;
//   outer.gguf       the matrices outside the blocks (embedding, head) in their plan types, made
//                    before block 0;
//   stats-LLL.gguf   block L's input statistics (only when the job saves --stats at the end);
//   hidden-LLL.f32   the calibration hidden states after block L (only the latest is kept);
//   lock             flock()ed while a job runs, so two jobs never share the folder.
// Every file is written atomically (formats/atomic_file.h) and state.json last, so a job killed at
// any instant leaves a folder that describes only complete files. Files the state does not list
// (a block written but not yet recorded, temporaries) are removed when the job resumes.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "calibrate/stats.h"
#include "formats/tensor_set.h"

namespace bonsai::quant {

// What to do with an OUT.partial/ found at the start: `fresh` refuses it (Error telling the user
// about --resume and --restart), `resume` continues it, `restart` discards it.
enum class PartialMode { fresh, resume, restart };

// What one finished block leaves behind.
struct BlockCheckpoint {
  std::vector<Tensor> tensors;       // quantized weights and their residual tensors
  nlohmann::ordered_json errors;     // the block's weights' errors (pipeline's WeightError, as JSON)
  const calib::Stats* stats = nullptr;          // the block's input statistics, or null
  std::span<const float> hidden;                // the hidden states after the block, or empty
};

class JobCheckpoint {
 public:
  // The checkpoint folder of `output` (`output` + ".partial"): created when absent (Error naming
  // the output when its folder is not writable, before any work), locked, and with `resume` its
  // state read back (not yet trusted: begin() checks it).
  JobCheckpoint(const std::string& output, PartialMode mode);
  ~JobCheckpoint();
  JobCheckpoint(const JobCheckpoint&) = delete;
  JobCheckpoint& operator=(const JobCheckpoint&) = delete;

  const std::string& dir() const { return dir_; }
  // The job recorded in the folder being resumed, or null (nothing to resume).
  const nlohmann::ordered_json* saved_job() const { return saved_ ? &job_ : nullptr; }

  // Binds the folder to `job`. A new job records it; a resumed one must match it exactly (Error
  // naming state.json and each differing field, with what to do) and every listed file must have
  // its recorded size and checksum. Removes the files the state does not list and the output's
  // stale temporaries. Returns the number of finished blocks.
  int64_t begin(const nlohmann::ordered_json& job, const std::string& output);
  int64_t blocks_done() const { return blocks_done_; }

  // Records block `l` (which must be blocks_done()) as finished.
  void save_block(int64_t l, const BlockCheckpoint& b);
  // Finished blocks, read back (checksums were verified by begin()): memory-mapped, so a finished
  // block costs no memory until its pages are read.
  TensorSet load_block(int64_t l, nlohmann::ordered_json* errors) const;
  // Block l's statistics file (Error when the job kept none), for calib::StatsFile / merge_stats.
  std::string stats_file(int64_t l) const;
  // The hidden states after block l into dst (Error when the file does not hold `count` floats).
  void load_hidden(int64_t l, float* dst, uint64_t count) const;
  // The matrices outside the blocks, recorded once (before block 0), and read back (mapped);
  // nullopt when this job has not saved them yet.
  void save_outer(std::span<const Tensor> tensors);
  std::optional<TensorSet> load_outer() const;

  // After the output is in place: removes the folder.
  void finish();
  // After an error: removes the folder when this job has finished no block (nothing worth
  // resuming) and leaves a folder it refused to resume as it was. Returns whether the folder
  // is kept holding this job's finished blocks (then the error should say --resume).
  bool abandon();

 private:
  std::string file(const std::string& name) const;
  void write_state();
  void record(const std::string& name);  // size + checksum of a file just written, into files_
  void clear();                          // removes the folder (only files bonsai writes there)

  std::string dir_, state_path_;
  int lock_fd_ = -1;
  bool saved_ = false, begun_ = false;
  nlohmann::ordered_json job_, files_ = nlohmann::ordered_json::object();
  int64_t blocks_done_ = 0;
};

// The fields where two job descriptions differ, for the refusal message ("seed: 1 here, 0 in the
// checkpoint; plan differs"); empty when they are equal.
std::string job_differences(const nlohmann::ordered_json& now, const nlohmann::ordered_json& saved);

}  // namespace bonsai::quant
