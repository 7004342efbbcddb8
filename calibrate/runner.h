// Block-by-block calibration: every window's hidden states are kept in memory and advanced one
// transformer block at a time. For block l the runner (a) runs the block over every window with
// the Session observer collecting the statistics of the block's inputs, (b) lets the caller
// replace the block's weights by quantized ones, (c) re-runs the block with those weights, so
// block l+1 is calibrated on the outputs of the blocks already quantized (GPTQ's sequential mode).
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
  double embed = 0, collect = 0, quantize = 0, advance = 0;
};

struct BlockDone {
  int64_t block = 0, n_blocks = 0;
  double seconds = 0;  // since the start of calibrate_blocks
  int64_t peak_rss_bytes = 0;
};

// windows: n_windows × len token ids, row-major. quantize_block(l, stats) must replace block l's
// weights in `m` (its LayerWeights pointers) and may leave them; `stats` holds every input
// measured so far, rounded to what save_stats stores. Returns all statistics.
// Runs on the CPU backend (hidden states live in host memory); threads as OpenMP is set.
Stats calibrate_blocks(Model& m, const std::vector<int32_t>& windows, int64_t n_windows, int64_t len,
                       const CalibrateOptions& opts, const std::function<void(int64_t, const Stats&)>& quantize_block,
                       const std::function<void(const BlockDone&)>& on_block = {}, CalibrateTimes* times = nullptr);

// How many model forwards (block runs over a window) calibrate_blocks has done in this process:
// lets tests check that reusing saved statistics runs none.
int64_t block_runs();

}  // namespace bonsai::calib
