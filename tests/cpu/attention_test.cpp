// Causal grouped-query attention against its formula evaluated in double, for token counts on both
// sides of the prompt path (SGEMM over chunks of query rows) and with earlier tokens in the cache.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cpu/attention.h"
#include "runtime/cpu/matmul.h"

using namespace bonsai;

namespace {

// k, v: n_head_kv heads of ctx positions of hd (attention.h's layout).
std::vector<float> reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             int64_t n, int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t ctx) {
  const int64_t group = n_head / n_head_kv;
  std::vector<float> out(size_t(n * n_head * hd));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t seen = pos0 + t + 1, kvh = h / group;
      std::vector<double> s(static_cast<size_t>(seen));
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < seen; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += double(q[size_t((t * n_head + h) * hd + i)]) * k[size_t((kvh * ctx + j) * hd + i)];
        s[size_t(j)] = d / std::sqrt(double(hd));
        mx = std::max(mx, s[size_t(j)]);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        for (int64_t j = 0; j < seen; ++j) o += s[size_t(j)] / sum * v[size_t((kvh * ctx + j) * hd + i)];
        out[size_t((t * n_head + h) * hd + i)] = float(o);
      }
    }
  return out;
}

}  // namespace

TEST(CpuAttention, MatchesFormulaForDecodeAndPromptSizes) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n_head = 4, n_head_kv = 2, hd = 16;
  // 1 and 5 tokens take the per-token loop (2100 earlier positions: a long run of cache rows); 16,
  // 70 and 150 the SGEMM path (150: two whole chunks of 64 query rows and a partial one).
  for (int64_t n : {1, 5, 16, 70, 150})
    for (int64_t pos0 : {0, 37, 2100}) {
      if (n > 5 && pos0 > 37) continue;
      const int64_t ctx = pos0 + n + 3;  // room past the last position, as a session's cache has
      std::vector<float> q(size_t(n * n_head * hd)), k(size_t(n_head_kv * ctx * hd)), v(k.size());
      for (auto* a : {&q, &k, &v})
        for (float& e : *a) e = nd(rng);
      std::vector<float> out(q.size());
      cpu::attention(q.data(), k.data(), v.data(), n, pos0, n_head, n_head_kv, hd, ctx, out.data());
      const auto want = reference(q, k, v, n, pos0, n_head, n_head_kv, hd, ctx);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], want[i], 2e-5 + 2e-5 * std::fabs(want[i])) << "n " << n << " pos0 " << pos0 << " at " << i;
    }
}

// Decode steps on the AVX-512 path (kernels_avx512.h's attend: scores four cached rows at a time,
// each head's output in registers) and on the path below it (ops.h's loops), against the formula,
// for head sizes of 1 to 16 registers, groups that fill its blocks of heads and leave partial ones,
// and spans that end in partial groups of four rows.
TEST(CpuAttention, DecodeOnEachPathMatchesFormula) {
  if (cpu::matmul_path_taken() != cpu::MatmulPath::avx512) GTEST_SKIP() << "no AVX-512 path on this CPU";
  struct Restore {
    cpu::MatmulPath cap;
    ~Restore() { cpu::cap_matmul_path(cap); }
  } restore{cpu::cap_matmul_path(cpu::MatmulPath::avx512)};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t hd : {16, 48, 64, 80, 128, 192, 256})
    for (int64_t group : {1, 2, 3, 5})
      for (int64_t seen : {1, 3, 4, 6, 17, 301}) {
        const int64_t n_head_kv = 2, n_head = group * n_head_kv, ctx = seen + 2, pos0 = seen - 1;
        std::vector<float> q(size_t(n_head * hd)), k(size_t(n_head_kv * ctx * hd)), v(k.size());
        for (auto* a : {&q, &k, &v})
          for (float& e : *a) e = nd(rng);
        const auto want = reference(q, k, v, 1, pos0, n_head, n_head_kv, hd, ctx);
        for (cpu::MatmulPath path : {cpu::MatmulPath::avx512, cpu::MatmulPath::avx2}) {
          cpu::cap_matmul_path(path);
          std::vector<float> out(q.size());
          cpu::attention(q.data(), k.data(), v.data(), 1, pos0, n_head, n_head_kv, hd, ctx, out.data());
          for (size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], want[i], 2e-5 + 2e-5 * std::fabs(want[i]))
                << "path " << int(path) << " head_dim " << hd << " group " << group << " seen " << seen << " at " << i;
        }
      }
}

// Each (head, chunk) of a prompt, and each (token, key/value head) of a few tokens, is one
// thread's work: the thread count must not change a bit.
class CpuAttentionThreads : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};
INSTANTIATE_TEST_SUITE_P(PromptAndDecode, CpuAttentionThreads,
                         ::testing::Values(std::pair<int64_t, int64_t>{100, 10}, std::pair<int64_t, int64_t>{3, 3000}));
TEST_P(CpuAttentionThreads, ResultDoesNotDependOnThreadCount) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const auto [n, pos0] = GetParam();
  const int64_t n_head = 4, n_head_kv = 2, hd = 32, ctx = pos0 + n;
  std::vector<float> q(size_t(n * n_head * hd)), k(size_t(n_head_kv * ctx * hd)), v(k.size());
  for (auto* a : {&q, &k, &v})
    for (float& e : *a) e = nd(rng);
  std::vector<float> y1(q.size()), y3(q.size());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu::attention(q.data(), k.data(), v.data(), n, pos0, n_head, n_head_kv, hd, ctx, y1.data());
  omp_set_num_threads(3);
  cpu::attention(q.data(), k.data(), v.data(), n, pos0, n_head, n_head_kv, hd, ctx, y3.data());
  omp_set_num_threads(saved);
  EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4));
}
