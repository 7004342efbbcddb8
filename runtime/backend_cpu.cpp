// The CPU backend: the transformer's operations on host memory, on the runtime's team of threads
// (team::run in cpu/parallel.h) across rows and heads, as many as omp_get_max_threads() says;
// matrix products by stored type come from matmul.h.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "formats/error.h"
#include "formats/mapped_file.h"
#include "runtime/backend.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/bandwidth.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/residual.h"

namespace bonsai {
namespace {

class CpuBackend final : public Backend {
  // Where alloc's buffers and the weight copies live (huge pages: runtime/cpu/huge_pages.h).
  // First, so that it outlives every member that points into it.
  cpu::HugePageArena pages_;

 public:
  explicit CpuBackend(int threads) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  std::string name() const override { return "cpu"; }

  // Zeroed (fresh pages) and in huge pages, as the weight copies: a KV cache's rows are the KV
  // width apart (4 KB in Qwen3-1.7B), so in 4 KB pages each cached position a head reads was a
  // page of its own.
  float* alloc(int64_t n) override { return reinterpret_cast<float*>(pages_.allocate(size_t(n) * sizeof(float))); }
  void to_host(const float* src, float* dst, int64_t n) override {
    if (src != dst) std::memcpy(dst, src, size_t(n) * sizeof(float));
  }
  void from_host(const float* src, float* dst, int64_t n) override { to_host(src, dst, n); }
  bool host_memory() const override { return true; }

  void embed(const Tensor& table, const int32_t* ids, int64_t n, float* out) override {
    cpu::get_rows(table, ids, n, out);
  }
  void matmul(const Tensor& w, const float* x, int64_t n, float* y) override {
    cpu::matmul(w, x, n, y, kernel_copy(w));
  }
  void matmul_shared(const Tensor* const* w, float* const* y, int count, const float* x, int64_t n) override {
    thread_local std::vector<std::span<const uint8_t>> copies;  // no allocation per call once warm
    copies.assign(size_t(std::max(count, 0)), {});
    for (int i = 0; i < count; ++i) copies[size_t(i)] = kernel_copy(*w[i]);
    cpu::matmul_shared(w, y, count, x, n, copies.data());
  }
  void matmul_residual(const ResidualView& r, const float* x, int64_t n, float* y) override {
    const auto& packed = cached(packed_, {r.index_uid, r.indices}, [&] { return cpu::pack_residual_indices(r); });
    cpu::residual_matmul(r, x, n, y, &packed);
  }

  void rmsnorm(const float* x, const std::vector<float>& weight, int64_t rows, int64_t dim, float eps,
               float* y) override {
    cpu::parallel_for(rows, rows > 16, [&](int64_t r) { cpu::rmsnorm(x + r * dim, weight.data(), dim, eps, y + r * dim); });
  }

  void add_bias(float* y, const std::vector<float>& bias, int64_t rows) override {
    const int64_t dim = int64_t(bias.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < dim; ++i) y[r * dim + i] += bias[size_t(i)];
  }

  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0, float base,
            bool neox) override {
    const int64_t half = n_rot / 2;
    // The table (n × half pow, cos and sin) is the same for q and k and for every layer of a step:
    // made once per step, not twice per layer (56 times a token for Qwen3-1.7B).
    const RopeKey key{pos0, n, n_rot, base};
    if (!(key == rope_key_)) {
      rope_key_ = key;
      rope_cos_.resize(size_t(n * half));
      rope_sin_.resize(size_t(n * half));
      cpu::parallel_for(n, n > 4, [&](int64_t t) {
        for (int64_t i = 0; i < half; ++i) {
          const double theta = double(pos0 + t) * std::pow(double(base), -2.0 * double(i) / double(n_rot));
          rope_cos_[size_t(t * half + i)] = float(std::cos(theta));
          rope_sin_[size_t(t * half + i)] = float(std::sin(theta));
        }
      });
    }
    const std::vector<float>& cs = rope_cos_;
    const std::vector<float>& sn = rope_sin_;
    // one index per (token, head): row th of x
    cpu::parallel_for(n * n_heads, n > 4, [&](int64_t th) {
      const int64_t t = th / n_heads;
      float* v = x + th * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float c = cs[size_t(t * half + i)], s = sn[size_t(t * half + i)];
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    });
  }

  // Head by head (cpu/attention.h): a head's cached positions are one contiguous run, which a
  // decode step reads front to back, instead of 512 bytes out of every position's 4 KB row.
  void* alloc_kv(int64_t n_ctx, int64_t n_head_kv, int64_t head_dim) override {
    float* cache = alloc(n_ctx * n_head_kv * head_dim);
    kv_shapes_[cache] = {n_ctx, n_head_kv, head_dim};
    return cache;
  }
  void store_kv(const float* src, void* cache, int64_t row0, int64_t n, int64_t dim) override {
    const KvShape& s = kv_shape(cache, dim);
    if (row0 < 0 || row0 + n > s.n_ctx)
      throw Error(cat("store_kv: positions ", row0, "..", row0 + n, " outside the cache's ", s.n_ctx));
    auto* dst = static_cast<float*>(cache);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < s.n_head_kv; ++h)
        std::memcpy(dst + (h * s.n_ctx + row0 + t) * s.head_dim, src + t * dim + h * s.head_dim,
                    size_t(s.head_dim) * sizeof(float));
  }

  void attention(const float* q, const void* k_cache_v, const void* v_cache_v, int64_t n, int64_t pos0,
                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float* out) override {
    const KvShape& s = kv_shape(k_cache_v, n_head_kv * head_dim);
    if (pos0 + n > s.n_ctx) throw Error(cat("attention: ", pos0 + n, " positions in a cache of ", s.n_ctx));
    cpu::attention(q, static_cast<const float*>(k_cache_v), static_cast<const float*>(v_cache_v), n, pos0, n_head,
                   n_head_kv, head_dim, s.n_ctx, out);
  }

  void copy(const float* src, float* dst, int64_t n) override { std::memmove(dst, src, size_t(n) * sizeof(float)); }
  void add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }
  void silu_mul(float* g, const float* u, int64_t n) override {
    // One exp per element: a prompt's n_ff × tokens of them is worth both threads.
    constexpr int64_t kChunk = 4096;
    cpu::parallel_for((n + kChunk - 1) / kChunk, n >= cpu::kParallelWork, [&](int64_t c) {
      const int64_t i = c * kChunk;
      cpu::swiglu(g + i, u + i, std::min(kChunk, n - i), g + i);
    });
  }
  void hadamard(const HadamardSpec& spec, float* x, int64_t n, int64_t k, bool inverse) override {
    if (inverse) hadamard_inverse(spec, x, n, k);
    else hadamard_forward(spec, x, n, k);
  }
  double measure_bandwidth_gbs() override {
    if (!probe_) probe_ = std::make_unique<cpu::ReadProbe>();  // kept for the next probes (bandwidth.h)
    return probe_->measure_gbs();
  }
  uint64_t probe_resident_bytes() const override { return probe_ ? probe_->bytes() : 0; }
  uint64_t read_bytes(const Tensor& w) override {
    const auto it = copies_.find({w.uid, w.data});
    return cpu::bytes_read(w, it != copies_.end() ? it->second : std::span<const uint8_t>());
  }

 private:
  std::unique_ptr<cpu::ReadProbe> probe_;
  // Each K/V cache's shape, by its address (alloc_kv).
  struct KvShape {
    int64_t n_ctx, n_head_kv, head_dim;
  };
  std::map<const void*, KvShape> kv_shapes_;
  const KvShape& kv_shape(const void* cache, int64_t dim) const {
    const auto it = kv_shapes_.find(cache);
    if (it == kv_shapes_.end()) throw Error("a K/V cache that alloc_kv did not make");
    if (it->second.n_head_kv * it->second.head_dim != dim)
      throw Error(cat("a K/V cache of ", it->second.n_head_kv, " x ", it->second.head_dim, " used with width ", dim));
    return it->second;
  }
  // The last rope table and what it was made for.
  struct RopeKey {
    int64_t pos0 = -1, n = 0, n_rot = 0;
    float base = 0;
    bool operator==(const RopeKey&) const = default;
  } rope_key_;
  std::vector<float> rope_cos_, rope_sin_;
  // Bytes derived from a weight (or residual), keyed by its uid and address, made on first use.
  using Key = std::pair<uint64_t, const uint8_t*>;
  template <class Bytes>
  using Cache = std::map<Key, Bytes>;
  template <class Bytes, class Make>
  static const Bytes& cached(Cache<Bytes>& cache, const Key& key, const Make& make) {
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, make()).first;
    return it->second;
  }

  // w's copy for its kernel (the copies_ cache).
  std::span<const uint8_t> kernel_copy(const Tensor& w) {
    return cached(copies_, {w.uid, w.data}, [&] {
      const auto c = cpu::pack_weights(w, pages_);
      // From now on only the copy is read: the file's pages need not stay resident beside it.
      if (!c.empty()) MappedFile::release(w.data, w.nbytes);
      return c;
    });
  }

  // Each residual's indices regrouped for the int8 lookup kernel (cpu::pack_residual_indices),
  // made on first use: as many bytes as the indices, which a token then reads instead.
  Cache<std::vector<uint8_t>> packed_;
  // Each weight's copy for its kernel (cpu::pack_weights; empty for most types), made on first use:
  // on the AVX-512 path PTQ1_0's codes for table lookups (30 bytes per 28), Q8_0's and PQ2_0's
  // slabs, on the AVX2 path PTQ1_0's blocks as PQ2_0 (34 bytes per 28), read instead of the file's
  // bytes from then on; the file's pages are released meanwhile (MappedFile::release).
  Cache<std::span<const uint8_t>> copies_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace bonsai
