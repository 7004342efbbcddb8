#include "calibrate/runner.h"

#include <algorithm>
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
                       const CalibrateOptions& opts, const QuantizeGroup& quantize_group,
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
  // The inputs of every window between steps: inputs 0 and 2 (n_embd wide) in one buffer, inputs
  // 1 and 3 (attention width, n_ff) in the other, each step reading one and writing the other.
  const int64_t wide = std::max(s.block_input_width(1), s.block_input_width(3));
  std::vector<float> narrow_in(size_t(n_windows * len * c.n_embd)), wide_in(size_t(n_windows * len * wide));
  // The group's input rows are gathered kGramRows at a time before InputStats::add: its Gram
  // product then runs on large panels, and its fold into the double sum (a pass over cols²
  // doubles) happens once per kGramRows rows rather than once per window. One buffer for every
  // group (allocated once: hundreds of MB, whose first touch costs page faults).
  const int64_t gather_rows = std::max(kGramRows, len);
  std::vector<float> rows(size_t(gather_rows * std::max(wide, c.n_embd)));
  for (int64_t l = opts.first_block; l < c.n_layer; ++l) {
    // The last block's step 4 only advances x, which nothing reads after it.
    const int steps = l + 1 < c.n_layer ? Session::kBlockSteps : Session::kBlockSteps - 1;
    for (int step = 0; step < steps; ++step) {
      // Step g forms input g (g < 4) from input g−1; `in` and `out` alternate between the buffers.
      const bool out_wide = step % 2 == 1;
      std::vector<float>& in_buf = out_wide ? narrow_in : wide_in;
      std::vector<float>& out_buf = out_wide ? wide_in : narrow_in;
      const int64_t in_w = step > 0 ? s.block_input_width(step - 1) : 0;
      const int64_t out_w = step < 4 ? s.block_input_width(step) : 0;
      Stats group;
      std::string input;
      int64_t n_rows = 0;
      auto flush = [&] {
        if (n_rows > 0) group.by_weight[input].add(rows.data(), n_rows);
        n_rows = 0;
      };
      auto observe = [&](const Tensor& w, const float* x, int64_t n) {
        InputStats& st = group.by_weight[w.name];
        if (st.cols == 0) {
          input = w.name;
          st.cols = w.ne[0];
          if (opts.gram) st.gram.assign(size_t(st.cols * st.cols), 0.0);
        }
        if (n_rows + n > gather_rows) flush();
        std::memcpy(rows.data() + n_rows * st.cols, x, size_t(n * st.cols) * sizeof(float));
        n_rows += n;
      };
      for (int64_t w = 0; w < n_windows; ++w) {
        t0 = std::chrono::steady_clock::now();
        float* in = step > 0 ? in_buf.data() + w * len * in_w : nullptr;
        float* out = step < 4 ? out_buf.data() + w * len * out_w : nullptr;
        s.run_block_step(l, step, hidden.data() + w * width, in, out, len);
        t.forward += since(t0);
        t0 = std::chrono::steady_clock::now();
        if (out) s.observe_group(l, step, out, len, observe);
        t.collect += since(t0);
        if (step == 0) {
          ++g_block_runs;
          kill_point("calibrate");
        }
      }
      if (step == 4) break;
      t0 = std::chrono::steady_clock::now();
      flush();
      for (auto& [name, st] : group.by_weight) {
        st.round_to_f32();
        all.by_weight[name] = std::move(st);
      }
      t.collect += since(t0);
      // The caller quantizes the weights that read this input; the next step computes with them.
      t0 = std::chrono::steady_clock::now();
      if (quantize_group) quantize_group(l, input, all);
      t.quantize += since(t0);
      if (!opts.keep_gram) std::vector<double>().swap(all.by_weight[input].gram);
    }
    if (opts.checkpoint) opts.checkpoint(l, hidden, all);
    if (on_block) on_block({l, c.n_layer, since(start), peak_rss_bytes()});
  }
  if (times) *times = t;
  return all;
}

}  // namespace bonsai::calib
