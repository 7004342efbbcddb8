// Block-by-block calibration in GPTQ's true-sequential order: every window's hidden states are kept
// in memory and advanced one transformer block at a time, and within a block one group of matrix
// products at a time (q/k/v, attention output, gate/up, down: Session::run_block_step). For each
// group the runner (a) forms the group's input over every window with the weights already
// quantized, collecting its statistics, (b) lets the caller replace the group's weights by
// quantized ones, and goes on with those. So every input is measured where the quantized model
// will see it, and each window passes through each block once.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "calibrate/stats.h"
#include "formats/spill_buffer.h"
#include "runtime/model.h"

namespace bonsai::calib {

// The statistics key of a weight: weights that read the same activations share the first one's
// entry (attn_k / attn_v read attn_q's input, ffn_up reads ffn_gate's).
std::string input_key(const std::string& weight_name);

// How long a group's Gram matrix stays in the statistics once its group is quantized.
enum class KeepGram {
  all,      // to the end: the statistics returned have every one
  block,    // until its block's checkpoint callback has seen it (which saves it), then freed
  group,    // freed at once (the callback may take it over): memory holds one at a time
};

struct CalibrateOptions {
  // The backend each block's forward runs on (make_backend: "cpu", "cuda[:N]"). On a device the
  // window buffers stay in host memory and each window is staged in and out; the statistics
  // accumulate on the device.
  std::string device = "cpu";
  bool gram = false;  // collect Gram matrices (what gptq needs); E[x²] is always collected
  KeepGram keep_gram = KeepGram::all;
  // The window buffers (hidden states and the groups' inputs, n_windows × len × width floats
  // each): where each lives. Default: in RAM. The job spills some to files when RAM is short.
  std::function<SpillBuffer(const std::string& what, size_t floats)> buffer;
  // Resuming a checkpointed job (quantize/checkpoint.h): blocks before `first_block` are done, their
  // weights already replaced in the model; `resume_hidden` fills the hidden states after them
  // (n_windows × len × n_embd floats; not called when every block is done). No forward runs for
  // the finished blocks.
  int64_t first_block = 0;
  std::function<void(float* hidden, size_t floats)> resume_hidden;
  // Called after block l is quantized and, unless it is the last, the hidden states advanced past
  // it: everything a resume at block l+1 needs (the hidden states, the block's statistics in `all`,
  // which it may take over with KeepGram::block: they are dropped after it anyway).
  std::function<void(int64_t l, std::span<const float> hidden, Stats& all)> checkpoint;
};

// The window buffers calibrate_blocks allocates through CalibrateOptions::buffer, in that order,
// with their sizes in floats (what quantize/memory_plan.h predicts the job's memory from).
struct WindowBuffer {
  std::string what;
  int64_t floats = 0;
};
std::vector<WindowBuffer> window_buffers(const ModelConfig& c, int64_t n_windows, int64_t len);
// Rows of a group's input gathered before each InputStats::add (one buffer of this many rows of
// the widest input, in RAM).
int64_t gather_rows(int64_t n_windows, int64_t len);

// Seconds spent per stage, summed over blocks.
struct CalibrateTimes {
  double embed = 0, forward = 0, collect = 0, quantize = 0;
};

struct BlockDone {
  std::string what = "calibrate blocks";  // for the progress line
  int64_t block = 0, n_blocks = 0;
  double seconds = 0;  // since the start of calibrate_blocks
  int64_t peak_rss_bytes = 0;
};

// windows: n_windows × len token ids, row-major. quantize_group(l, input, stats) is called for the
// four groups of block l in order, `input` naming the group's statistics entry (its first weight:
// input_key); it must replace the block-l weights that read that input in `m` (their LayerWeights
// pointers), and may leave them. `stats` holds the inputs measured so far that are still kept
// (KeepGram), rounded to what save_stats stores; with KeepGram::group the callback may take the
// group's Gram matrix over. Returns the statistics kept. The hidden states live in host memory
// (or their spill files) whatever the device; threads as OpenMP is set.
using QuantizeGroup = std::function<void(int64_t l, const std::string& input, Stats&)>;
Stats calibrate_blocks(Model& m, const std::vector<int32_t>& windows, int64_t n_windows, int64_t len,
                       const CalibrateOptions& opts, const QuantizeGroup& quantize_group,
                       const std::function<void(const BlockDone&)>& on_block = {}, CalibrateTimes* times = nullptr);

// How many block runs over a window calibrate_blocks has done in this process:
// lets tests check that reusing saved statistics runs none.
int64_t block_runs();

}  // namespace bonsai::calib
