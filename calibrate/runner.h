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
#include <string>
#include <vector>

#include "calibrate/stats.h"
#include "runtime/model.h"

namespace bonsai::calib {

// The statistics key of a weight: weights that read the same activations share the first one's
// entry (attn_k / attn_v read attn_q's input, ffn_up reads ffn_gate's).
std::string input_key(const std::string& weight_name);

struct CalibrateOptions {
  bool gram = false;  // collect Gram matrices (what gptq needs); E[x²] is always collected
  // false: each Gram matrix is freed once its group is quantized, so memory holds one block's at a
  // time (the statistics returned and checkpointed then have none: only for jobs that save none).
  bool keep_gram = true;
  // Resuming a checkpointed job (quantize/checkpoint.h): blocks before `first_block` are done, their
  // weights already replaced in the model; `resume_hidden` holds the hidden states after them
  // (n_windows × len × n_embd, taken over: left empty; not needed when every block is done) and
  // `resume_stats` their statistics (taken over too). No forward runs for the finished blocks.
  int64_t first_block = 0;
  std::vector<float>* resume_hidden = nullptr;
  Stats* resume_stats = nullptr;
  // Called after block l is quantized and, unless it is the last, the hidden states advanced past
  // it: everything a resume at block l+1 needs (the statistics so far, the hidden states).
  std::function<void(int64_t l, const std::vector<float>& hidden, const Stats& all)> checkpoint;
};

// Seconds spent per stage, summed over blocks.
struct CalibrateTimes {
  double embed = 0, forward = 0, collect = 0, quantize = 0;
};

struct BlockDone {
  int64_t block = 0, n_blocks = 0;
  double seconds = 0;  // since the start of calibrate_blocks
  int64_t peak_rss_bytes = 0;
};

// windows: n_windows × len token ids, row-major. quantize_group(l, input, stats) is called for the
// four groups of block l in order, `input` naming the group's statistics entry (its first weight:
// input_key); it must replace the block-l weights that read that input in `m` (their LayerWeights
// pointers), and may leave them. `stats` holds every input measured so far, rounded to what
// save_stats stores. Returns all statistics. Runs on the CPU backend (hidden states live in host
// memory); threads as OpenMP is set.
using QuantizeGroup = std::function<void(int64_t l, const std::string& input, const Stats&)>;
Stats calibrate_blocks(Model& m, const std::vector<int32_t>& windows, int64_t n_windows, int64_t len,
                       const CalibrateOptions& opts, const QuantizeGroup& quantize_group,
                       const std::function<void(const BlockDone&)>& on_block = {}, CalibrateTimes* times = nullptr);

// How many block runs over a window calibrate_blocks has done in this process:
// lets tests check that reusing saved statistics runs none.
int64_t block_runs();

}  // namespace bonsai::calib
