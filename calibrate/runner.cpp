#include "calibrate/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "formats/error.h"
#include "formats/kill_point.h"
#include "runtime/bench.h"
#include "runtime/transformer.h"

#ifdef BONSAI_HAVE_CALIBRATE_CUDA
#include <optional>

#include "calibrate/cuda/device_stats.h"
#endif

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

// One group's input statistics, from what its products see (Session::observe_group): on the host
// its rows are gathered for InputStats::add; on a device backend they are already in device
// memory and accumulate there (calibrate/cuda, on the backend's own stream).
class GroupCollector {
 public:
  GroupCollector(bool gram, std::vector<float>& rows, int64_t max_rows, Backend& be)
      : gram_(gram), rows_(rows), max_rows_(max_rows), be_(be) {}

  void observe(const Tensor& w, const float* x, int64_t n) {
    if (st_.cols == 0) {
      input_ = w.name;
      st_.cols = w.ne[0];
    }
    if (!be_.host_memory()) return observe_device(x, n);
    if (gram_ && st_.gram.empty()) st_.gram.assign(size_t(st_.cols * st_.cols), 0.0);
    if (n_rows_ + n > max_rows_) flush();
    std::memcpy(rows_.data() + n_rows_ * st_.cols, x, size_t(n * st_.cols) * sizeof(float));
    n_rows_ += n;
  }

  const std::string& input() const { return input_; }

  // The sums, rounded to what save_stats stores.
  InputStats finish() {
#ifdef BONSAI_HAVE_CALIBRATE_CUDA
    if (device_) st_ = device_->download();
#endif
    flush();
    st_.round_to_f32();
    return std::move(st_);
  }

 private:
  void flush() {
    if (n_rows_ > 0) st_.add(rows_.data(), n_rows_);
    n_rows_ = 0;
  }
  void observe_device(const float* x, int64_t n) {
#ifdef BONSAI_HAVE_CALIBRATE_CUDA
    if (!device_) device_.emplace(st_.cols, gram_, static_cast<CUstream_st*>(be_.native_stream()));
    device_->add(x, n);
#else
    (void)x, (void)n;
    throw Error(cat("calibration on ", be_.name(), ": this build has no device statistics (BONSAI_CUDA=OFF)"));
#endif
  }

  bool gram_;
  std::vector<float>& rows_;
  int64_t max_rows_;
  Backend& be_;
  std::string input_;
  InputStats st_;
  int64_t n_rows_ = 0;
#ifdef BONSAI_HAVE_CALIBRATE_CUDA
  std::optional<cuda::DeviceStats> device_;
#endif
};

// One window's buffers as the backend sees them: the host buffers themselves on the CPU; on a
// device, copies staged in and out around each step (the windows' buffers stay in host memory,
// where they may be far larger than the device's).
class WindowStage {
 public:
  WindowStage(Backend& be, int64_t len, int64_t n_embd, int64_t wide) : be_(be) {
    if (be.host_memory()) return;
    x_ = be.alloc(len * n_embd);
    in_ = be.alloc(len * wide);
    out_ = be.alloc(len * wide);
  }
  // Host pointers (null: none) -> what run_block_step takes; their sizes in floats.
  void enter(float* x, int64_t nx, float* in, int64_t nin, float* out, int64_t nout) {
    hx_ = x, hout_ = out, nx_ = nx, nout_ = nout;
    if (be_.host_memory()) {
      dx_ = x, din_ = in, dout_ = out;
      return;
    }
    be_.from_host(x, x_, nx);
    if (in) be_.from_host(in, in_, nin);
    dx_ = x_, din_ = in ? in_ : nullptr, dout_ = out ? out_ : nullptr;
  }
  void leave() {
    if (be_.host_memory()) return;
    be_.to_host(x_, hx_, nx_);
    if (hout_) be_.to_host(out_, hout_, nout_);
  }
  float *dx_ = nullptr, *din_ = nullptr, *dout_ = nullptr;

 private:
  Backend& be_;
  float *x_ = nullptr, *in_ = nullptr, *out_ = nullptr;
  float *hx_ = nullptr, *hout_ = nullptr;
  int64_t nx_ = 0, nout_ = 0;
};

}  // namespace

std::string input_key(const std::string& weight_name) {
  std::string k = weight_name;
  if (replace_suffix(k, ".attn_k.weight", ".attn_q.weight") || replace_suffix(k, ".attn_v.weight", ".attn_q.weight") ||
      replace_suffix(k, ".ffn_up.weight", ".ffn_gate.weight"))
    return k;
  return weight_name;
}

int64_t block_runs() { return g_block_runs.load(); }

std::vector<WindowBuffer> window_buffers(const ModelConfig& c, int64_t n_windows, int64_t len) {
  // The inputs between steps: inputs 0 and 2 (n_embd wide) in one buffer, inputs 1 and 3
  // (attention width, n_ff) in the other, each step reading one and writing the other.
  const int64_t wide = std::max(Session::block_input_width(c, 1), Session::block_input_width(c, 3));
  return {{"hidden states", n_windows * len * c.n_embd},
          {"inputs of q/k/v and gate/up", n_windows * len * c.n_embd},
          {"inputs of the output and down projections", n_windows * len * wide}};
}

// The group's input rows are gathered kGramRows at a time before InputStats::add: its Gram product
// then runs on large panels, and its fold into the double sum (a pass over cols² doubles) happens
// once per kGramRows rows rather than once per window. Never more rows than the windows hold (the
// flushes then fall where they would with a larger buffer).
int64_t gather_rows(int64_t n_windows, int64_t len) { return std::min(std::max(kGramRows, len), n_windows * len); }

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
  const int64_t width = len * c.n_embd;

  if (opts.first_block < 0 || opts.first_block > c.n_layer)
    throw Error(cat("calibration: resuming at block ", opts.first_block, " of a model with ", c.n_layer));
  const bool resume = opts.first_block > 0;
  // Every block done: nothing to run, no hidden states needed.
  if (resume && opts.first_block < c.n_layer && !opts.resume_hidden)
    throw Error(cat("calibration: resuming at block ", opts.first_block, " needs the hidden states after block ",
                    opts.first_block - 1));
  const std::vector<WindowBuffer> bufs = window_buffers(c, n_windows, len);
  auto buffer = [&](const WindowBuffer& b) {
    return opts.buffer ? opts.buffer(b.what, size_t(b.floats)) : SpillBuffer::in_ram(size_t(b.floats));
  };

  // Hidden states of every window: n_windows × len × n_embd floats.
  auto t0 = std::chrono::steady_clock::now();
  SpillBuffer hidden = buffer(bufs[0]);
  if (resume) {
    if (opts.first_block < c.n_layer) opts.resume_hidden(hidden.data(), hidden.size());
  } else {
    const auto be = make_backend("cpu", 0);
    for (int64_t w = 0; w < n_windows; ++w) {
      float* x = hidden.data() + w * width;
      be->embed(*m.token_embd, windows.data() + w * len, len, x);
      if (m.hadamard.inverse_weights.count(m.token_embd->name)) be->hadamard(m.hadamard, x, len, c.n_embd, true);
    }
  }
  t.embed += since(t0);

  Stats all;
  SpillBuffer narrow_in = buffer(bufs[1]), wide_in = buffer(bufs[2]);
  // One gather buffer for every group (allocated once: hundreds of MB, whose first touch costs
  // page faults).
  const int64_t wide = std::max(Session::block_input_width(c, 1), Session::block_input_width(c, 3));
  // On a device the rows accumulate where they are: no gather buffer.
  std::vector<float> rows(opts.device == "cpu" ? size_t(gather_rows(n_windows, len) * std::max(wide, c.n_embd)) : 0);
  const int64_t max_rows = gather_rows(n_windows, len);
  for (int64_t l = opts.first_block; l < c.n_layer; ++l) {
    std::vector<std::string> block_inputs;  // the statistics entries this block adds
    // A backend and session per block: the kernel copies a backend makes of the block's quantized
    // weights (cpu::pack_weights, a device's uploads) go with it, so memory does not grow with the
    // blocks done.
    const auto be = make_backend(opts.device, 0);
    Session s(m, *be, len, len);
    WindowStage stage(*be, len, c.n_embd, wide);
    // The last block's step 4 only advances x, which nothing reads after it.
    const int steps = l + 1 < c.n_layer ? Session::kBlockSteps : Session::kBlockSteps - 1;
    for (int step = 0; step < steps; ++step) {
      // Step g forms input g (g < 4) from input g−1; `in` and `out` alternate between the buffers.
      const bool out_wide = step % 2 == 1;
      SpillBuffer& in_buf = out_wide ? narrow_in : wide_in;
      SpillBuffer& out_buf = out_wide ? wide_in : narrow_in;
      const int64_t in_w = step > 0 ? s.block_input_width(step - 1) : 0;
      const int64_t out_w = step < 4 ? s.block_input_width(step) : 0;
      GroupCollector group(opts.gram, rows, max_rows, *be);
      auto observe = [&](const Tensor& w, const float* x, int64_t n) { group.observe(w, x, n); };
      for (int64_t w = 0; w < n_windows; ++w) {
        t0 = std::chrono::steady_clock::now();
        stage.enter(hidden.data() + w * width, width, step > 0 ? in_buf.data() + w * len * in_w : nullptr, len * in_w,
                    step < 4 ? out_buf.data() + w * len * out_w : nullptr, len * out_w);
        s.run_block_step(l, step, stage.dx_, stage.din_, stage.dout_, len);
        t.forward += since(t0);
        t0 = std::chrono::steady_clock::now();
        if (stage.dout_) s.observe_group(l, step, stage.dout_, len, observe);
        t.collect += since(t0);
        stage.leave();
        if (step == 0) {
          ++g_block_runs;
          kill_point("calibrate");
        }
      }
      if (step == 4) break;
      t0 = std::chrono::steady_clock::now();
      const std::string input = group.input();
      block_inputs.push_back(input);
      all.by_weight[input] = group.finish();
      t.collect += since(t0);
      // The caller quantizes the weights that read this input; the next step computes with them.
      t0 = std::chrono::steady_clock::now();
      if (quantize_group) quantize_group(l, input, all);
      t.quantize += since(t0);
      if (opts.keep_gram == KeepGram::group) std::vector<double>().swap(all.by_weight[input].gram);
    }
    if (opts.checkpoint) opts.checkpoint(l, std::span<const float>(hidden.data(), hidden.size()), all);
    if (opts.keep_gram == KeepGram::block)
      for (const std::string& name : block_inputs) std::vector<double>().swap(all.by_weight[name].gram);
    if (on_block) on_block({"calibrate blocks", l, c.n_layer, since(start), peak_rss_bytes()});
  }
  if (times) *times = t;
  return all;
}

}  // namespace bonsai::calib
