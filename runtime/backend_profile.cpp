#include "runtime/backend_profile.h"

#include <algorithm>

#include "formats/types.h"

namespace bonsai {
namespace {

// "blk.12.attn_q.weight" -> "attn_q": every layer's product in one entry.
std::string role(const std::string& name) {
  std::string s = name;
  if (s.rfind("blk.", 0) == 0)
    if (const size_t dot = s.find('.', 4); dot != std::string::npos) s = s.substr(dot + 1);
  if (s.size() > 7 && s.compare(s.size() - 7, 7, ".weight") == 0) s.resize(s.size() - 7);
  return s;
}

}  // namespace

std::vector<OpTime> ProfilingBackend::times() const {
  std::vector<OpTime> v;
  for (const auto& [op, t] : ops_) {
    v.push_back(t);
    v.back().op = op;
  }
  std::sort(v.begin(), v.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return v;
}

// "matmul attn_q+attn_k+attn_v (PTQ1_0, 2048 x 4096)": the roles, the type, columns x rows
// summed; the bytes the backend reads for them.
OpTime ProfilingBackend::products(const Tensor* const* w, int count) {
  OpTime e;
  std::string names;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) {
    if (i > 0) names += '+';
    names += role(w[i]->name);
    rows += w[i]->ne.size() > 1 ? w[i]->ne[1] : 1;
    e.bytes += inner_.read_bytes(*w[i]);
  }
  const int64_t cols = w[0]->ne.empty() ? 0 : w[0]->ne[0];
  e.op = "matmul " + names + " (" + traits(w[0]->type).name + ", " + std::to_string(cols) + " x " +
         std::to_string(rows) + ")";
  return e;
}

void ProfilingBackend::embed(const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  timed([] { return OpTime{"embed"}; }, [&] { inner_.embed(table, ids, n, out); });
}
void ProfilingBackend::matmul(const Tensor& w, const float* x, int64_t n, float* y) {
  const Tensor* one = &w;
  timed([&] { return products(&one, 1); }, [&] { inner_.matmul(w, x, n, y); });
}
void ProfilingBackend::matmul_shared(const Tensor* const* w, float* const* y, int count, const float* x, int64_t n) {
  timed([&] { return products(w, count); }, [&] { inner_.matmul_shared(w, y, count, x, n); });
}
void ProfilingBackend::matmul_residual(const ResidualView& r, const float* x, int64_t n, float* y) {
  timed([&] { return OpTime{"residual " + role(r.base)}; }, [&] { inner_.matmul_residual(r, x, n, y); });
}
void ProfilingBackend::rmsnorm(const float* x, const std::vector<float>& weight, int64_t rows, int64_t dim, float eps,
                               float* y) {
  timed([&] { return OpTime{"rmsnorm (" + std::to_string(rows) + " x " + std::to_string(dim) + ")"}; },
        [&] { inner_.rmsnorm(x, weight, rows, dim, eps, y); });
}
void ProfilingBackend::add_bias(float* y, const std::vector<float>& bias, int64_t rows) {
  timed([] { return OpTime{"add_bias"}; }, [&] { inner_.add_bias(y, bias, rows); });
}
void ProfilingBackend::rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0,
                            float base, bool neox) {
  timed([] { return OpTime{"rope"}; }, [&] { inner_.rope(x, n, n_heads, head_dim, n_rot, pos0, base, neox); });
}
void ProfilingBackend::store_kv(const float* src, void* cache, int64_t row0, int64_t n, int64_t dim) {
  timed([] { return OpTime{"store_kv"}; }, [&] { inner_.store_kv(src, cache, row0, n, dim); });
}
void ProfilingBackend::attention(const float* q, const void* k_cache, const void* v_cache, int64_t n, int64_t pos0,
                                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float* out) {
  timed([] { return OpTime{"attention"}; }, [&] { inner_.attention(q, k_cache, v_cache, n, pos0, n_head, n_head_kv, head_dim, out); });
}
void ProfilingBackend::copy(const float* src, float* dst, int64_t n) {
  timed([] { return OpTime{"copy"}; }, [&] { inner_.copy(src, dst, n); });
}
void ProfilingBackend::add(float* x, const float* y, int64_t n) {
  timed([] { return OpTime{"add"}; }, [&] { inner_.add(x, y, n); });
}
void ProfilingBackend::silu_mul(float* g, const float* u, int64_t n) {
  timed([] { return OpTime{"silu_mul"}; }, [&] { inner_.silu_mul(g, u, n); });
}
void ProfilingBackend::hadamard(const HadamardSpec& spec, float* x, int64_t n, int64_t k, bool inverse) {
  timed([] { return OpTime{"hadamard"}; }, [&] { inner_.hadamard(spec, x, n, k, inverse); });
}

}  // namespace bonsai
