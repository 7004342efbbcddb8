// The memory a quantize job needs, predicted from the model's shape and the options before any
// work, so that a job that cannot fit is refused at once instead of being killed hours in.
// The pipeline streams: the source stays memory-mapped, a block's weights are decoded one matrix
// at a time and finished blocks live in their checkpoint files. What remains in RAM is one
// matrix's work (its F32 copy, its statistics, the method's matrices), the calibration's window
// buffers, the forward's scratch and the process itself; only the window buffers may spill to a
// file beside the output. The figures are upper bounds of what the code allocates (the terms are
// named in memory_plan.cpp); docs/scale.md compares them with measured peaks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "quantize/plan.h"
#include "quantize/residual.h"
#include "runtime/model.h"

namespace bonsai::quant {

struct MemoryItem {
  std::string what;
  uint64_t bytes = 0;
};

// What decides the job's memory, beside the model and its plan.
struct MemoryJob {
  bool calibrate = false;   // measure statistics with a forward (else: reuse a file, or none)
  bool gram = false;        // with Gram matrices (gptq, tune)
  bool keep_stats = false;  // statistics saved at the end: each Gram matrix is copied, not taken
  int64_t windows = 0, len = 0;
  ResidualKind residual = ResidualKind::none;
};

struct MemoryNeed {
  std::vector<MemoryItem> fixed;    // in RAM at the peak
  std::vector<MemoryItem> buffers;  // the calibration's window buffers (may spill)
  std::string peak_matrix;          // the matrix whose work is the largest, for the message
  uint64_t fixed_bytes() const;
  uint64_t buffer_bytes() const;
};

MemoryNeed predict_memory(const ModelConfig& cfg, const ResolvedPlan& plan, const MemoryJob& job);

// The memory this process may take: the smaller of /proc/meminfo's MemAvailable and what the
// cgroup's memory.max leaves; `source` says which (for the messages).
uint64_t available_memory(std::string* source);

// Where the window buffers go: in RAM while the total stays within `limit`, the rest (largest
// first) spilled. Error, before any work, when even with every buffer spilled the fixed part does
// not fit: the message names the limit, its source and the largest matrix's share.
struct MemoryPlacement {
  std::vector<bool> spill;  // per MemoryNeed::buffers entry
  uint64_t ram_bytes = 0;   // predicted peak in RAM
  uint64_t spilled_bytes = 0;
};
MemoryPlacement place_memory(const MemoryNeed& need, uint64_t limit, const std::string& limit_source);

// On a GPU (--device cuda): what the device holds at a block's peak — the CUDA context and
// libraries (a stated allowance), the block's forward session (cudaMalloc'd whole: every layer's
// K/V cache in fp16, the activations and logits of one window), one window staged in and out, the
// block's uploaded weights, and the larger of the widest input's statistics (calibrate/cuda) and
// the largest matrix's GPTQ (quantize/cuda). Only the block being processed is on the device.
// Empty in a build without CUDA.
std::vector<MemoryItem> predict_device_memory(const ModelConfig& cfg, const ResolvedPlan& plan, const MemoryJob& job);
// Error, before any work, when the device need exceeds `free_bytes` on `device`: it names the
// device, the need and its largest part.
void check_device_memory(const std::vector<MemoryItem>& need, uint64_t free_bytes, const std::string& device);

// The table the job prints before it starts.
std::string memory_table(const MemoryNeed& need, const MemoryPlacement& place, uint64_t limit,
                         const std::string& limit_source);

}  // namespace bonsai::quant
