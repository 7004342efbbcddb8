// The CUDA backend: runtime/backend.h on one GPU. Weights are uploaded once, in their stored
// types, the first time an operation reads them (keyed by their Tensor::uid and host address:
// one backend may serve several models in turn, as a mixed-precision sweep does, and a later
// file can be mapped where an earlier one was); activations are float32, the KV cache fp16. Decode steps (one token)
// are recorded and replayed as CUDA graphs (launcher.cuh).
#include <cuda_fp16.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/matmul.cuh"
#include "runtime/cuda/ops.cuh"

namespace bonsai {
namespace {

using cuda::DeviceMatrix;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
      throw Error(cat("device 'cuda:", device, "': no CUDA device is available",
                      e != cudaSuccess ? cat(" (", cudaGetErrorString(e), ")") : std::string()));
    if (device < 0 || device >= count)
      throw Error(cat("device 'cuda:", device, "': this machine has ", count, " CUDA device(s)"));
    BONSAI_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    BONSAI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    gpu_name_ = prop.name;
    BONSAI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    launch_ = std::make_unique<cuda::Launcher>(stream_);
    pos_ = static_cast<int*>(raw_alloc(sizeof(int)));
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    launch_.reset();
    scratch_.reset();
    for (void* p : allocations_) cudaFree(p);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return cat("cuda:", device_, " (", gpu_name_, ")"); }

  float* alloc(int64_t n) override { return static_cast<float*>(raw_alloc(size_t(n) * sizeof(float))); }
  void to_host(const float* src, float* dst, int64_t n) override {
    BONSAI_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    BONSAI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // Synchronous: the host buffer may be reused as soon as this returns.
  void from_host(const float* src, float* dst, int64_t n) override {
    BONSAI_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyHostToDevice, stream_));
    BONSAI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void* native_stream() const override { return stream_; }

  void embed(const Tensor& table, const int32_t* ids, int64_t n, float* out) override {
    act_key_ = {};
    if (n > ids_cap_) {
      ids_ = static_cast<int32_t*>(raw_alloc(size_t(n) * sizeof(int32_t)));
      ids_cap_ = n;
    }
    // Pageable source: the copy is staged before the call returns, so `ids` may change after.
    BONSAI_CUDA_CHECK(cudaMemcpyAsync(ids_, ids, size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    cuda::get_rows(*launch_, matrix(table), ids_, n, out);
  }
  void matmul(const Tensor& w, const float* x, int64_t n, float* y) override {
    const DeviceMatrix m = matrix(w);
    const ActKey key{x, w.type, m.cols, n};
    cuda::matmul(*launch_, m, x, n, y, *scratch_, key == act_key_, n == 1 ? one_token_path(m) : std::string());
    // y overwriting x would change what the quantized activations stand for.
    const bool overlap = y < x + m.cols * n && x < y + m.rows * n;
    act_key_ = overlap ? ActKey{} : key;
  }
  void rmsnorm(const float* x, const std::vector<float>& weight, int64_t rows, int64_t dim, float eps,
               float* y) override {
    act_key_ = {};
    cuda::rmsnorm(*launch_, x, vec(weight), rows, dim, eps, y);
  }
  void add_bias(float* y, const std::vector<float>& bias, int64_t rows) override {
    act_key_ = {};
    cuda::add_bias(*launch_, y, vec(bias), rows, int64_t(bias.size()));
  }
  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0, float base,
            bool neox) override {
    act_key_ = {};
    cuda::rope(*launch_, x, n, n_heads, head_dim, n_rot, pos_, pos0 - step_pos_, base, neox);
  }
  void* alloc_kv(int64_t n_ctx, int64_t n_head_kv, int64_t head_dim) override {
    return raw_alloc(size_t(n_ctx * n_head_kv * head_dim) * sizeof(half));
  }
  void store_kv(const float* src, void* cache, int64_t row0, int64_t n, int64_t dim) override {
    act_key_ = {};
    cuda::store_kv(*launch_, src, static_cast<half*>(cache), pos_, row0 - step_pos_, n, dim);
  }
  void attention(const float* q, const void* k_cache, const void* v_cache, int64_t n, int64_t pos0, int64_t n_head,
                 int64_t n_head_kv, int64_t head_dim, float* out) override {
    act_key_ = {};
    cuda::attention(*launch_, q, static_cast<const half*>(k_cache), static_cast<const half*>(v_cache), n, pos_,
                    pos0 - step_pos_, n_head, n_head_kv, head_dim, out);
  }
  void copy(const float* src, float* dst, int64_t n) override {
    act_key_ = {};
    cuda::copy(*launch_, src, dst, n);
  }
  void add(float* x, const float* y, int64_t n) override {
    act_key_ = {};
    cuda::add(*launch_, x, y, n);
  }
  void silu_mul(float* g, const float* u, int64_t n) override {
    act_key_ = {};
    cuda::silu_mul(*launch_, g, u, n);
  }
  void hadamard(const HadamardSpec& spec, float* x, int64_t n, int64_t k, bool inverse) override {
    act_key_ = {};
    const float* signs = nullptr;
    if (!spec.signs.empty()) {
      auto it = spec.signs.find(k);
      if (it == spec.signs.end()) throw Error(cat("no prism.hadamard sign vector of width ", k));
      signs = vec(it->second);
    }
    cuda::hadamard(*launch_, x, n, k, spec.block, signs, inverse);
  }

  void begin_step(int64_t pos0, int64_t n) override {
    act_key_ = {};
    // The step's position goes to device memory ahead of the step; its kernels read it there.
    cuda::set_pos(stream_, pos_, pos0);
    step_pos_ = pos0;
    launch_->begin(n == 1);
  }
  void end_step() override { launch_->end(); }

  double measure_bandwidth_gbs() override {
    BONSAI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    size_t free_b = 0, total_b = 0;
    BONSAI_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // Far larger than the L2 cache (tens of MB), small enough to fit beside the model.
    const size_t bytes = std::min<size_t>(size_t(4) << 30, free_b / 4) & ~size_t(255);
    return cuda::read_bandwidth_gbs(bytes);
  }

 private:
  // Zeroed device memory, or filled from host memory `from` (all work on stream_, in order).
  void* raw_alloc(size_t bytes, const void* from = nullptr) {
    void* p = nullptr;
    BONSAI_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
    allocations_.push_back(p);
    if (from) {
      BONSAI_CUDA_CHECK(cudaMemcpyAsync(p, from, bytes, cudaMemcpyHostToDevice, stream_));
      BONSAI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } else {
      BONSAI_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    }
    return p;
  }
  // The device copy of a weight, uploaded on first use.
  DeviceMatrix matrix(const Tensor& t) {
    const auto key = std::make_pair(t.uid, t.data);
    auto it = uploaded_.find(key);
    if (it == uploaded_.end()) {
      void* p = raw_alloc(t.nbytes, t.data);
      it = uploaded_.emplace(key, static_cast<const uint8_t*>(p)).first;
    }
    const int64_t cols = t.ne.empty() ? 0 : t.ne[0];
    const auto rb = row_bytes(t.type, uint64_t(cols));
    if (!rb || t.ne.size() < 2) throw Error(cat("tensor '", t.name, "' ", t.shape_str(), " is not a matrix of ", traits(t.type).name));
    return DeviceMatrix{t.type, it->second, t.rows(), cols, int64_t(*rb)};
  }
  // The one-token kernel of each matrix shape, timed once (cuda::fastest_one_token_path).
  const std::string& one_token_path(const DeviceMatrix& m) {
    const auto key = std::make_tuple(m.type, m.rows, m.cols);
    auto it = one_token_paths_.find(key);
    if (it == one_token_paths_.end()) it = one_token_paths_.emplace(key, cuda::fastest_one_token_path(stream_, m)).first;
    return it->second;
  }
  // The device copy of a host vector (norm weights, biases, Hadamard signs), keyed by address and
  // length and checked against a host copy of its contents at every use: vectors are small, and a
  // later model's vector may sit where an earlier one's was.
  const float* vec(const std::vector<float>& v) {
    const auto key = std::make_pair(static_cast<const void*>(v.data()), v.size());
    auto it = vectors_.find(key);
    if (it == vectors_.end() || it->second.host != v) {
      VectorCopy c{static_cast<const float*>(raw_alloc(v.size() * sizeof(float), v.data())), v};
      if (it == vectors_.end()) it = vectors_.emplace(key, std::move(c)).first;
      else it->second = std::move(c);
    }
    return it->second.device;
  }

  // The input whose quantized activations the last matmul left in scratch_ (cuda::matmul):
  // every other operation may write device memory and forgets it.
  struct ActKey {
    const float* x = nullptr;
    TypeId type = TypeId::F32;
    int64_t cols = 0, n = 0;
    bool operator==(const ActKey&) const = default;
  };

  int device_;
  std::string gpu_name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Launcher> launch_;
  std::unique_ptr<cuda::ActScratch> scratch_ = std::make_unique<cuda::ActScratch>();
  std::vector<void*> allocations_;
  std::map<std::pair<uint64_t, const uint8_t*>, const uint8_t*> uploaded_;
  struct VectorCopy {
    const float* device;
    std::vector<float> host;
  };
  std::map<std::pair<const void*, size_t>, VectorCopy> vectors_;
  std::map<std::tuple<TypeId, int64_t, int64_t>, std::string> one_token_paths_;
  int* pos_ = nullptr;
  int64_t step_pos_ = 0;
  int32_t* ids_ = nullptr;
  int64_t ids_cap_ = 0;
  ActKey act_key_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace bonsai
