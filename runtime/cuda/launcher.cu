#include "runtime/cuda/launcher.cuh"

namespace bonsai::cuda {

Launcher::~Launcher() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

bool Launcher::Launch::same(const Launch& b) const {
  return func == b.func && grid.x == b.grid.x && grid.y == b.grid.y && grid.z == b.grid.z && block.x == b.block.x &&
         block.y == b.block.y && block.z == b.block.z && smem == b.smem && bytes == b.bytes;
}

void Launcher::launch_now(Launch& l) {
  std::vector<void*> ptrs;
  for (size_t o : l.offsets) ptrs.push_back(l.bytes.data() + o);
  BONSAI_CUDA_CHECK(cudaLaunchKernel(l.func, l.grid, l.block, ptrs.data(), l.smem, stream_));
}

void Launcher::begin(bool record) {
  n_pending_ = 0;  // a step abandoned by an exception leaves nothing behind
  recording_ = record;
}

void Launcher::end() {
  if (!recording_) return;
  recording_ = false;
  bool same = exec_ && n_pending_ == cached_.size();
  for (size_t i = 0; same && i < n_pending_; ++i) same = pending_[i].same(cached_[i]);
  if (!same) {
    cudaGraph_t graph = nullptr;
    BONSAI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      for (size_t i = 0; i < n_pending_; ++i) launch_now(pending_[i]);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    BONSAI_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    BONSAI_CUDA_CHECK(e);
    cached_.assign(pending_.begin(), pending_.begin() + std::ptrdiff_t(n_pending_));
    ++captures_;
  }
  n_pending_ = 0;
  BONSAI_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

}  // namespace bonsai::cuda
