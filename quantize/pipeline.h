// The quantize pipeline: source model (Hugging Face folder, GGUF, .bonsai) -> calibration block by
// block, each block quantized by its plan entry as soon as its input statistics are known (or
// statistics reused from a file, with no model forward) -> GGUF or .bonsai with the quantized
// tensors, F32 norms, the source's metadata, and for .bonsai the plan, provenance and per-weight
// errors. It streams, so that its memory does not grow with the model's depth: the source stays
// memory-mapped, each block weight is decoded to F32 (and rotated) only when its turn comes, and a
// finished block lives in its checkpoint file (quantize/checkpoint.h), from which the output is
// written at the end. What it needs is predicted and printed before any work, and refused when the
// machine (or --max-memory) has less (quantize/memory_plan.h). The result does not depend on the
// thread count; a job killed at any point resumes from its last finished block and writes the same
// bytes as one that was never interrupted. quantize/job.h has the phases.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "calibrate/runner.h"
#include "quantize/checkpoint.h"
#include "quantize/plan.h"
#include "quantize/residual.h"
#include "quantize/ternary.h"
#include "quantize/weight_error.h"
#include "runtime/model.h"

namespace bonsai::quant {

// The method used when neither the command line nor the plan names one.
constexpr Method kDefaultMethod = Method::gptq;
constexpr const char* kDefaultPlan = "ternary-keep-embed-head-q8";

struct QuantizeOptions {
  std::string source, output;
  std::string plan = kDefaultPlan;  // preset name or YAML file
  PlanOverrides overrides;          // --tensor-type, --output-tensor-type, --token-embedding-type
  std::optional<Method> method;     // --method
  bool rotate = false;              // --rotate hadamard
  int64_t rotate_block = 128;
  std::vector<std::string> calib_files;  // empty: default_calib_files()
  int64_t calib_windows = 128, calib_len = 512;
  std::string stats_path;  // load when the file exists, else save there after calibrating
  uint64_t seed = 0;       // rotation signs and calibration windows (datasets::sample_windows)
  bool dry_run = false;    // resolve and report the plan, nothing else
  std::optional<TypeId> ternary_type;  // --type: the plan's ternary tensors become this type
  ResidualOptions residual;            // --residual, --rc-dim, --rc-size, --rc-rows
  MethodOptions method_opts;           // --gptq-passes, --tune-steps, --tune-lr (four_levels: set by --type)
  std::string from;                    // --from: a saved stage-1 result (GGUF or .bonsai) to start stage 2 from
  // Crash-safe jobs (quantize/checkpoint.h): each finished block is kept in OUT.partial/ until the
  // output is in place. `partial` says what to do with one a killed job left (--resume, --restart).
  PartialMode partial = PartialMode::fresh;
  // --max-memory: the RAM the job may take (0: what the machine has available). The calibration's
  // window buffers beyond it spill to files beside the output; a job whose fixed part exceeds it
  // is refused before any work.
  uint64_t max_memory = 0;
  // --device: where the calibration forward, its statistics and gptq's numerics run ("cpu",
  // "cuda[:N]"). Only the block being processed is on the GPU; the CPU path is the reference.
  std::string device = "cpu";
};

struct QuantizeEvents {
  std::function<void(const std::string&)> info;              // a line of text (the plan table, notes)
  std::function<void(const calib::BlockDone&)> block_done;   // calibration progress
};

// One step of the job: its time, the process's peak RSS (high-water mark, mapped files' pages
// included) when it ended, and the peak of its anonymous memory during the step (runtime/
// anon_peak.h). The calibration's four parts alternate block by block; they end together, so they
// share one peak.
struct StageTime {
  std::string name;
  double seconds = 0;
  int64_t peak_rss_bytes = 0;
  int64_t peak_anon_bytes = 0;
};

struct QuantizeResult {
  ResolvedPlan plan;
  std::vector<WeightError> errors;  // block matrices, in model order
  std::vector<StageTime> stages;    // in order
  bool calibrated = false, stats_loaded = false;
  int64_t calib_tokens = 0;  // tokens run through the model per block
  uint64_t file_bytes = 0;
  int64_t peak_rss_bytes = 0;
  int64_t peak_anon_bytes = 0;
  uint64_t predicted_ram_bytes = 0;  // memory_plan.h's prediction, printed before the work
  uint64_t predicted_device_bytes = 0;  // the same for the GPU (--device cuda)
  int64_t peak_device_bytes = 0;        // the device memory the job's GPU work held at most
  uint64_t spilled_bytes = 0;        // calibration buffers placed in files
};

QuantizeResult quantize_model(const QuantizeOptions& opts, const QuantizeEvents& ev = {});

// The calibration text used without --calib: the calib-*.txt files of $BONSAI_SHARED_DIR/corpora/zh,
// else of ../shared/corpora/zh (from the working directory); empty when neither exists.
std::vector<std::string> default_calib_files();

// The whole model as the methods see it, in memory: the plan's block matrices as F32 working
// copies (matrix_quant.h's working_copy: W·S·H when `rotation` is given, which then becomes the
// model's HadamardSpec), the other matrices in their plan type, 1-D tensors as stored. Tensors
// left as stored point into `src`, which must outlive the model. The job itself never holds this
// (it streams); tests use it to check that the rotation changes nothing, and as the in-memory
// reference the streaming job must match byte for byte.
std::unique_ptr<Model> working_model(const TensorSet& src, const ResolvedPlan& plan, const HadamardSpec* rotation,
                                     const MethodOptions& mo = {});

}  // namespace bonsai::quant
