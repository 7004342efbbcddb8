#include "calibrate/runner.h"

#include <atomic>
#include <chrono>
#include <cstring>

#include "formats/error.h"
#include "formats/kill_point.h"
#include "runtime/bench.h"
#include "runtime/transformer.h"

namespace bonsai::calib {

namespace {

std::atomic<int64_t> g_block_runs{0};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool replace_suffix(std::string& s, const std::string& from, const std::string& to) {
  if (!s.ends_with(from)) return false;
  s.replace(s.size() - from.size(), from.size(), to);
  return true;
}

}  // namespace

std::string input_key(const std::string& weight_name) {
  std::string k = weight_name;
  if (replace_suffix(k, ".attn_k.weight", ".attn_q.weight") || replace_suffix(k, ".attn_v.weight", ".attn_q.weight") ||
      replace_suffix(k, ".ffn_up.weight", ".ffn_gate.weight"))
    return k;
  return weight_name;
}

int64_t block_runs() { return g_block_runs.load(); }

Stats calibrate_blocks(Model& m, const std::vector<int32_t>& windows, int64_t n_windows, int64_t len,
                       const CalibrateOptions& opts, const std::function<void(int64_t, const Stats&)>& quantize_block,
                       const std::function<void(const BlockDone&)>& on_block, CalibrateTimes* times) {
  const ModelConfig& c = m.cfg;
  if (n_windows <= 0 || len <= 0 || int64_t(windows.size()) != n_windows * len)
    throw Error(cat("calibration: ", windows.size(), " token ids for ", n_windows, " windows of ", len));
  for (int32_t id : windows)
    if (id < 0 || id >= c.n_vocab) throw Error(cat("calibration: token id ", id, " is outside the vocabulary"));
  CalibrateTimes t;
  const auto start = std::chrono::steady_clock::now();
  auto be = make_backend("cpu", 0);
  const int64_t width = len * c.n_embd;

  if (opts.first_block < 0 || opts.first_block > c.n_layer)
    throw Error(cat("calibration: resuming at block ", opts.first_block, " of a model with ", c.n_layer));
  const bool resume = opts.first_block > 0;
  // Every block done: nothing to run, no hidden states needed.
  if (resume && opts.first_block < c.n_layer &&
      (!opts.resume_hidden || opts.resume_hidden->size() != size_t(n_windows * width)))
    throw Error(cat("calibration: resuming at block ", opts.first_block, " needs ", n_windows * width,
                    " hidden-state values, got ", opts.resume_hidden ? opts.resume_hidden->size() : 0));

  // Hidden states of every window: n_windows × len × n_embd floats.
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> hidden;
  if (resume) {
    if (opts.resume_hidden) hidden.swap(*opts.resume_hidden);
  } else {
    hidden.resize(size_t(n_windows * width));
    for (int64_t w = 0; w < n_windows; ++w) {
      float* x = hidden.data() + w * width;
      be->embed(*m.token_embd, windows.data() + w * len, len, x);
      if (m.hadamard.inverse_weights.count(m.token_embd->name)) be->hadamard(m.hadamard, x, len, c.n_embd, true);
    }
  }
  t.embed += since(t0);

  Session s(m, *be, len, len);
  Stats all;
  if (resume && opts.resume_stats) all = std::move(*opts.resume_stats);
  std::vector<float> scratch(static_cast<size_t>(width));
  for (int64_t l = opts.first_block; l < c.n_layer; ++l) {
    // (a) statistics of the block's inputs, from a copy of the hidden states.
    t0 = std::chrono::steady_clock::now();
    Stats block;
    s.set_observer([&](const Tensor& w, const float* x, int64_t n) {
      if (input_key(w.name) != w.name) return;  // same input as a weight already observed
      InputStats& st = block.by_weight[w.name];
      if (st.cols == 0) {
        st.cols = w.ne[0];
        if (opts.gram) st.gram.assign(size_t(st.cols * st.cols), 0.0);
      }
      st.add(x, n);
    });
    for (int64_t w = 0; w < n_windows; ++w) {
      std::memcpy(scratch.data(), hidden.data() + w * width, size_t(width) * sizeof(float));
      s.run_block(l, scratch.data(), len);
      ++g_block_runs;
      kill_point("calibrate");
    }
    s.set_observer({});
    for (auto& [name, st] : block.by_weight) {
      st.round_to_f32();
      all.by_weight[name] = std::move(st);
    }
    t.collect += since(t0);

    // (b) the caller quantizes the block.
    t0 = std::chrono::steady_clock::now();
    if (quantize_block) quantize_block(l, all);
    t.quantize += since(t0);

    // (c) advance the hidden states through the quantized block (not needed after the last).
    t0 = std::chrono::steady_clock::now();
    if (l + 1 < c.n_layer)
      for (int64_t w = 0; w < n_windows; ++w) {
        s.run_block(l, hidden.data() + w * width, len);
        ++g_block_runs;
      }
    t.advance += since(t0);
    if (opts.checkpoint) opts.checkpoint(l, hidden, all);
    if (on_block) on_block({l, c.n_layer, since(start), peak_rss_bytes()});
  }
  if (times) *times = t;
  return all;
}

}  // namespace bonsai::calib
