#include "quantize/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "calibrate/runner.h"
#include "formats/byte_size.h"
#include "formats/error.h"
#include "runtime/transformer.h"

#ifdef BONSAI_HAVE_QUANT_CUDA
#include "calibrate/cuda/device_stats.h"
#include "quantize/cuda/gptq_cuda.h"
#endif

namespace bonsai::quant {

namespace {

// The process before any tensor: code, libraries (OpenBLAS's and OpenMP's buffers, LibTorch's
// static data), the tokenizer. Measured at 0.15-0.2 GB on the CPU machines; rounded up.
constexpr uint64_t kProcessBytes = uint64_t(256) << 20;

uint64_t f4(double n) { return uint64_t(4.0 * n); }
uint64_t f8(double n) { return uint64_t(8.0 * n); }

// One matrix's work while it is quantized: its F32 working copy, its statistics as the methods
// read them, the method's own matrices, then the decoded result and the error's difference.
uint64_t matrix_work(const TensorPlan& t, const MemoryJob& job, bool has_stats) {
  const double r = double(t.ne.size() > 1 ? t.ne[1] : 1), c = double(t.ne[0]), rc = r * c, cc = c * c;
  uint64_t b = f4(rc);  // working copy
  if (!is_ternary(t.type)) return b + f4(rc) + f4(rc) + t.bytes;  // + decoded + error's difference
  const bool gram = has_stats && job.gram && t.method && method_needs_gram(*t.method);
  if (has_stats) b += f4(c) + (gram ? f8(cc) * (job.keep_stats ? 2 : 1) : 0);  // E[x²], E[xxᵀ] (+ the kept sums)
  uint64_t method = uint64_t(rc);  // codes
  if (gram && *t.method == Method::gptq)
    // The damped H and its inverse factor in double (quantize/gptq.cpp), or later the float factor
    // and the refit's G beside the error-fed copy of W and W·G.
    method = std::max(f8(cc) * 2, f4(cc) * 2 + f4(rc) * 2 + uint64_t(2 * rc));
  else if (gram)  // tune: LibTorch's graph holds a few copies of a row chunk's tensors; E·G whole
    method = f4(cc) + f4(rc) * 6;
  b += method + f4(rc) * 2 + t.bytes;  // + Ŵ decoded and the error's difference
  if (t.type == TypeId::PQ2_0) b += f4(rc) * 2 + uint64_t(rc);  // stage 2 keeps stage 1's result
  if (job.residual != ResidualKind::none) b += f4(rc) * 3;      // R, R̂ and Ŵ + R̂
  return b;
}

}  // namespace

uint64_t MemoryNeed::fixed_bytes() const {
  return std::accumulate(fixed.begin(), fixed.end(), uint64_t{0}, [](uint64_t a, const MemoryItem& i) { return a + i.bytes; });
}
uint64_t MemoryNeed::buffer_bytes() const {
  return std::accumulate(buffers.begin(), buffers.end(), uint64_t{0},
                         [](uint64_t a, const MemoryItem& i) { return a + i.bytes; });
}

MemoryNeed predict_memory(const ModelConfig& cfg, const ResolvedPlan& plan, const MemoryJob& job) {
  MemoryNeed need;
  need.fixed.push_back({"process (code, libraries, BLAS buffers)", kProcessBytes});
  const bool stats = job.calibrate || plan.needs_importance();
  // The largest matrix's work, and the largest block's quantized bytes (held until its checkpoint).
  uint64_t work = 0, outer = 0, outer_work = 0, block_bytes = 0;
  std::vector<uint64_t> per_block(size_t(std::max<int64_t>(cfg.n_layer, 0)), 0);
  for (const TensorPlan& t : plan.tensors) {
    if (t.ne.size() < 2) continue;
    if (t.block < 0) {
      // Made before block 0 (embedding, head) and saved together: every result, and for a
      // ternary type the method's work without statistics.
      outer += t.bytes;
      if (is_ternary(t.type)) outer_work = std::max(outer_work, matrix_work(t, job, false));
      continue;
    }
    if (size_t(t.block) < per_block.size()) per_block[size_t(t.block)] += t.bytes;
    const uint64_t w = matrix_work(t, job, stats);
    if (w > work) work = w, need.peak_matrix = t.name;
  }
  for (uint64_t b : per_block) block_bytes = std::max(block_bytes, b);
  uint64_t collect = 0;
  if (job.calibrate) {
    const double wide = double(std::max(Session::block_input_width(cfg, 1), Session::block_input_width(cfg, 3)));
    const double e = double(cfg.n_embd);
    const double kv = double(cfg.n_head_kv * cfg.head_dim), q = double(cfg.n_head * cfg.head_dim), ff = double(cfg.n_ff);
    // The forward's session for one block (runtime/transformer.cpp): the K/V cache of that block's
    // layer for one window (the other layers' caches are mapped but never touched, so never
    // resident) and the activations of its tokens (the logits buffer is never touched either).
    need.fixed.push_back({"forward: one layer's K/V cache and the activations of one window",
                          f4(2.0 * double(job.len) * kv) +
                              f4(double(job.len) * (2 * e + 2 * q + 2 * kv + 2 * ff + std::max({e, ff, q})))});
    need.fixed.push_back({"statistics: the gathered input rows",
                          f4(double(calib::gather_rows(job.windows, job.len)) * std::max(wide, e))});
    // Collecting the widest input: its Gram sum in double and one float product (stats.cpp);
    // with statistics saved, the block's earlier Gram sums stay until its checkpoint.
    for (int g = 0; g < 4; ++g) {
      const double c = double(Session::block_input_width(cfg, g));
      collect = std::max(collect, job.gram ? f8(c * c) + f4(c * c) : f8(c));
    }
    if (job.gram && job.keep_stats)
      for (int g = 0; g < 3; ++g) collect += f8(double(Session::block_input_width(cfg, g)) * double(Session::block_input_width(cfg, g)));
    for (const calib::WindowBuffer& b : calib::window_buffers(cfg, job.windows, job.len))
      need.buffers.push_back({b.what, f4(double(b.floats))});
  }
  need.fixed.push_back({"one block's quantized tensors (until its checkpoint)", block_bytes});
  need.fixed.push_back({"one matrix's work (" + (need.peak_matrix.empty() ? std::string("none") : need.peak_matrix) + ")",
                        std::max({work, collect, outer + outer_work})});
  return need;
}

std::vector<MemoryItem> predict_device_memory(const ModelConfig& cfg, const ResolvedPlan& plan, const MemoryJob& job) {
  std::vector<MemoryItem> need;
#ifdef BONSAI_HAVE_QUANT_CUDA
  // The context, cuBLAS's and cuSOLVER's handles and kernels: an allowance, checked on the GPU
  // runs of docs/scale.md.
  need.push_back({"CUDA context and libraries (allowance)", uint64_t(1) << 30});
  const double len = double(job.calibrate ? job.len : 0), e = double(cfg.n_embd), ff = double(cfg.n_ff);
  const double kv = double(cfg.n_head_kv * cfg.head_dim), q = double(cfg.n_head * cfg.head_dim);
  const double wide = std::max(q, ff);
  if (job.calibrate) {
    need.push_back({"forward: every layer's K/V cache (fp16), activations and logits of one window",
                    uint64_t(2.0 * 2.0 * double(cfg.n_layer) * len * kv) +
                        f4(len * (2 * e + 2 * q + 2 * kv + 2 * ff + std::max({e, ff, q}) + double(cfg.n_vocab)))});
    need.push_back({"one window staged in and out", f4(len * (e + 2 * wide))});
  }
  uint64_t block_bytes = 0, largest = 0;
  std::vector<uint64_t> per_block(size_t(std::max<int64_t>(cfg.n_layer, 0)), 0);
  for (const TensorPlan& t : plan.tensors) {
    if (t.block < 0 || t.ne.size() < 2) continue;
    if (size_t(t.block) < per_block.size()) per_block[size_t(t.block)] += t.bytes;
    if (is_ternary(t.type) && t.method == Method::gptq)
      largest = std::max(largest, uint64_t(quant::cuda::gptq_device_bytes(t.ne[1], t.ne[0])));
  }
  for (uint64_t b : per_block) block_bytes = std::max(block_bytes, b);
  if (job.calibrate) need.push_back({"the block's weights, uploaded", block_bytes});
  uint64_t stats = 0;
  if (job.calibrate)
    for (int g = 0; g < 4; ++g)
      stats = std::max(stats, uint64_t(calib::cuda::device_stats_bytes(Session::block_input_width(cfg, g), job.gram)));
  need.push_back({"the widest input's statistics, or the largest matrix's gptq", std::max(stats, largest)});
#else
  (void)cfg, (void)plan, (void)job;
#endif
  return need;
}

void check_device_memory(const std::vector<MemoryItem>& need, uint64_t free_bytes, const std::string& device) {
  uint64_t total = 0;
  const MemoryItem* top = nullptr;
  for (const MemoryItem& i : need) {
    total += i.bytes;
    if (!top || i.bytes > top->bytes) top = &i;
  }
  if (total > free_bytes)
    throw Error(cat(device, ": one block of this job needs ", human_bytes(double(total)), " of GPU memory (the largest part: ",
                    top->what, ", ", human_bytes(double(top->bytes)), ") and the device has ",
                    human_bytes(double(free_bytes)), " free: use a GPU with more memory, fewer --calib-len tokens, or "
                    "--device cpu"));
}

uint64_t available_memory(std::string* source) {
  uint64_t avail = 0;
  std::ifstream mi("/proc/meminfo");
  for (std::string line; std::getline(mi, line);)
    if (line.starts_with("MemAvailable:")) avail = uint64_t(std::stoull(line.substr(13))) * 1024;
  *source = "the machine's available memory (MemAvailable)";
  // cgroup v2: the limit of the group this process runs in, less what the group uses.
  std::ifstream cg("/proc/self/cgroup");
  std::string line, group;
  while (std::getline(cg, line))
    if (line.starts_with("0::")) group = line.substr(3);
  std::ifstream mx("/sys/fs/cgroup" + group + "/memory.max"), cur("/sys/fs/cgroup" + group + "/memory.current");
  std::string max_s;
  uint64_t used = 0;
  if (mx >> max_s && max_s != "max" && cur >> used) {
    const uint64_t lim = std::stoull(max_s), left = lim > used ? lim - used : 0;
    if (avail == 0 || left < avail) {
      avail = left;
      *source = "the cgroup's memory.max less its use";
    }
  }
  return avail;
}

MemoryPlacement place_memory(const MemoryNeed& need, uint64_t limit, const std::string& limit_source) {
  MemoryPlacement p;
  p.spill.assign(need.buffers.size(), false);
  const uint64_t fixed = need.fixed_bytes();
  if (fixed > limit)
    throw Error(cat("this job needs ", human_bytes(double(fixed)), " of RAM at its peak even with the calibration buffers "
                    "spilled to disk (", need.fixed.back().what, ": ", human_bytes(double(need.fixed.back().bytes)),
                    "), and ", limit_source, " is ", human_bytes(double(limit)),
                    ": give it more memory (--max-memory), or calibrate fewer windows (--calib-windows) "
                    "or a plan with smaller matrices per method"));
  p.ram_bytes = fixed + need.buffer_bytes();
  std::vector<size_t> order(need.buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return need.buffers[a].bytes > need.buffers[b].bytes; });
  for (size_t i : order) {
    if (p.ram_bytes <= limit) break;
    p.spill[i] = true;
    p.ram_bytes -= need.buffers[i].bytes;
    p.spilled_bytes += need.buffers[i].bytes;
  }
  return p;
}

std::string memory_table(const MemoryNeed& need, const MemoryPlacement& place, uint64_t limit,
                         const std::string& limit_source) {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof buf, "memory: %s of RAM at the peak (limit %s: %s)\n", human_bytes(double(place.ram_bytes)).c_str(),
                human_bytes(double(limit)).c_str(), limit_source.c_str());
  os << buf;
  for (const MemoryItem& i : need.fixed) {
    std::snprintf(buf, sizeof buf, "  %-62s %12s\n", i.what.c_str(), human_bytes(double(i.bytes)).c_str());
    os << buf;
  }
  for (size_t k = 0; k < need.buffers.size(); ++k) {
    const std::string what = "calibration buffer: " + need.buffers[k].what;
    std::snprintf(buf, sizeof buf, "  %-62s %12s%s\n", what.c_str(), human_bytes(double(need.buffers[k].bytes)).c_str(),
                  place.spill[k] ? "  (spilled to a file beside the output)" : "");
    os << buf;
  }
  return os.str();
}

}  // namespace bonsai::quant
