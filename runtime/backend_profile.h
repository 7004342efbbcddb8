// Where a generated token's time goes, call by call: `bonsai bench --profile`. A backend that passes
// every call to another one (ForwardingBackend) and, while recording, adds each call's wall time to
// its operation's entry (ProfilingBackend). The times are the calls' own only where a call has
// finished when it returns, as on the CPU; a GPU queues its calls (and replays decode steps as
// CUDA graphs), so bench refuses --profile there.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace bonsai {

// Every call goes to `inner`; a subclass overrides the ones it changes.
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  float* alloc(int64_t n) override { return inner_.alloc(n); }
  void to_host(const float* src, float* dst, int64_t n) override { inner_.to_host(src, dst, n); }
  void from_host(const float* src, float* dst, int64_t n) override { inner_.from_host(src, dst, n); }
  bool host_memory() const override { return inner_.host_memory(); }
  void* native_stream() const override { return inner_.native_stream(); }
  void embed(const Tensor& table, const int32_t* ids, int64_t n, float* out) override { inner_.embed(table, ids, n, out); }
  void matmul(const Tensor& w, const float* x, int64_t n, float* y) override { inner_.matmul(w, x, n, y); }
  void matmul_shared(const Tensor* const* w, float* const* y, int count, const float* x, int64_t n) override {
    inner_.matmul_shared(w, y, count, x, n);
  }
  void matmul_residual(const ResidualView& r, const float* x, int64_t n, float* y) override {
    inner_.matmul_residual(r, x, n, y);
  }
  void rmsnorm(const float* x, const std::vector<float>& weight, int64_t rows, int64_t dim, float eps,
               float* y) override {
    inner_.rmsnorm(x, weight, rows, dim, eps, y);
  }
  void add_bias(float* y, const std::vector<float>& bias, int64_t rows) override { inner_.add_bias(y, bias, rows); }
  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0, float base,
            bool neox) override {
    inner_.rope(x, n, n_heads, head_dim, n_rot, pos0, base, neox);
  }
  void* alloc_kv(int64_t n_ctx, int64_t n_head_kv, int64_t head_dim) override {
    return inner_.alloc_kv(n_ctx, n_head_kv, head_dim);
  }
  void store_kv(const float* src, void* cache, int64_t row0, int64_t n, int64_t dim) override {
    inner_.store_kv(src, cache, row0, n, dim);
  }
  void attention(const float* q, const void* k_cache, const void* v_cache, int64_t n, int64_t pos0, int64_t n_head,
                 int64_t n_head_kv, int64_t head_dim, float* out) override {
    inner_.attention(q, k_cache, v_cache, n, pos0, n_head, n_head_kv, head_dim, out);
  }
  void copy(const float* src, float* dst, int64_t n) override { inner_.copy(src, dst, n); }
  void add(float* x, const float* y, int64_t n) override { inner_.add(x, y, n); }
  void silu_mul(float* g, const float* u, int64_t n) override { inner_.silu_mul(g, u, n); }
  void hadamard(const HadamardSpec& spec, float* x, int64_t n, int64_t k, bool inverse) override {
    inner_.hadamard(spec, x, n, k, inverse);
  }
  void begin_step(int64_t pos0, int64_t n) override { inner_.begin_step(pos0, n); }
  void end_step() override { inner_.end_step(); }
  double measure_bandwidth_gbs() override { return inner_.measure_bandwidth_gbs(); }
  uint64_t probe_resident_bytes() const override { return inner_.probe_resident_bytes(); }
  uint64_t read_bytes(const Tensor& w) override { return inner_.read_bytes(w); }

 protected:
  Backend& inner_;
};

// One operation's calls while recording: a product's key names its weights (the layer prefix
// dropped, so one entry holds every layer's), their type and shape; the others their operation.
struct OpTime {
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
  uint64_t bytes = 0;  // weight bytes the products read (as the backend reads them: read_bytes)
};

// Times the compute calls (not alloc, to_host, the bandwidth probe) while record(true).
class ProfilingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void record(bool on) { recording_ = on; }
  // The entries, the longest first.
  std::vector<OpTime> times() const;

  void embed(const Tensor& table, const int32_t* ids, int64_t n, float* out) override;
  void matmul(const Tensor& w, const float* x, int64_t n, float* y) override;
  void matmul_shared(const Tensor* const* w, float* const* y, int count, const float* x, int64_t n) override;
  void matmul_residual(const ResidualView& r, const float* x, int64_t n, float* y) override;
  void rmsnorm(const float* x, const std::vector<float>& weight, int64_t rows, int64_t dim, float eps,
               float* y) override;
  void add_bias(float* y, const std::vector<float>& bias, int64_t rows) override;
  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0, float base,
            bool neox) override;
  void store_kv(const float* src, void* cache, int64_t row0, int64_t n, int64_t dim) override;
  void attention(const float* q, const void* k_cache, const void* v_cache, int64_t n, int64_t pos0, int64_t n_head,
                 int64_t n_head_kv, int64_t head_dim, float* out) override;
  void copy(const float* src, float* dst, int64_t n) override;
  void add(float* x, const float* y, int64_t n) override;
  void silu_mul(float* g, const float* u, int64_t n) override;
  void hadamard(const HadamardSpec& spec, float* x, int64_t n, int64_t k, bool inverse) override;

 private:
  // Runs call() and, while recording, adds its time to the entry that entry() names (an OpTime
  // with op and bytes set; made only while recording, so a run without --profile pays nothing).
  template <class Entry, class Call>
  void timed(const Entry& entry, const Call& call) {
    if (!recording_) return call();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const OpTime one = entry();
    OpTime& e = ops_[one.op];
    e.seconds += s;
    e.calls += 1;
    e.bytes += one.bytes;
  }
  OpTime products(const Tensor* const* w, int count);

  bool recording_ = false;
  std::map<std::string, OpTime> ops_;
};

}  // namespace bonsai
