// Every kernel of the CUDA backend is launched through a Launcher, which runs it at once or, in a
// recorded step, keeps it to replay as a CUDA graph. A decode step launches hundreds of small
// kernels; one graph launch instead of hundreds of kernel launches is what keeps the launch
// overhead from dominating small models.
//
// A recorded step is the list of (kernel, grid, block, shared bytes, argument bytes). At the end of
// the step it is compared with the step the cached graph was made from: when they are equal, the
// graph is launched; otherwise the kernels are captured into a new graph (and launched). Position
// arguments stay equal from token to token because the kernels read the step's position from
// device memory (set before the step) and take only offsets from it as arguments.
#pragma once
#include <cuda_runtime.h>

#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#include "runtime/cuda/check.cuh"

namespace bonsai::cuda {

class Launcher {
 public:
  explicit Launcher(cudaStream_t s) : stream_(s) {}
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Launches kernel k (now, or at end() when recording) with arguments converted to its
  // parameter types; they must be trivially copyable scalars or pointers.
  template <typename... P, typename... A>
  void operator()(void (*k)(P...), dim3 grid, dim3 block, size_t smem, A... a) {
    static_assert(sizeof...(P) == sizeof...(A), "argument count");
    std::tuple<P...> args(static_cast<P>(a)...);
    if (!recording_) {
      std::apply([&](auto&... x) { k<<<grid, block, smem, stream_>>>(x...); }, args);
      BONSAI_CUDA_CHECK(cudaGetLastError());
      return;
    }
    // The records are reused from step to step, so that recording allocates nothing once warm.
    if (n_pending_ == pending_.size()) pending_.emplace_back();
    Launch& l = pending_[n_pending_++];
    l.func = reinterpret_cast<const void*>(k);
    l.grid = grid, l.block = block, l.smem = smem;
    l.bytes.clear();
    l.offsets.clear();
    std::apply([&](auto&... x) { (l.pack(x), ...); }, args);
  }

  // Between begin(true) and end(), launches are recorded and replayed as a graph.
  void begin(bool record);
  void end();
  // Graphs captured so far: one per change of the recorded step (a decode keeps one).
  int captures() const { return captures_; }

 private:
  struct Launch {
    const void* func = nullptr;
    dim3 grid, block;
    size_t smem = 0;
    std::vector<unsigned char> bytes;  // arguments, each at its alignment
    std::vector<size_t> offsets;
    template <typename T>
    void pack(const T& v) {
      static_assert(std::is_trivially_copyable_v<T> && std::is_scalar_v<T>, "kernel arguments must be scalars");
      size_t o = (bytes.size() + alignof(T) - 1) / alignof(T) * alignof(T);
      bytes.resize(o + sizeof(T), 0);
      std::memcpy(bytes.data() + o, &v, sizeof(T));
      offsets.push_back(o);
    }
    bool same(const Launch& b) const;
  };
  void launch_now(Launch& l);

  cudaStream_t stream_;
  bool recording_ = false;
  std::vector<Launch> pending_, cached_;  // pending_: the first n_pending_ are this step's
  size_t n_pending_ = 0;
  cudaGraphExec_t exec_ = nullptr;
  int captures_ = 0;
};

}  // namespace bonsai::cuda
