// The CUDA backend against the CPU backend, operation by operation through runtime/backend.h,
// and a whole model decoded token by token (the recorded-graph path) against the CPU.
// Tolerances: elementwise operations 1e-5 relative (same float arithmetic); attention 2e-3 of
// the output scale (the CUDA KV cache is fp16, 2^-11 relative per value).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda_support.h"
#include "runtime/backend.h"
#include "runtime/cuda/launcher.cuh"
#include "runtime/cuda/ops.cuh"
#include "runtime/model.h"
#include "runtime/transformer.h"
#include "support.h"

using namespace bonsai;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Runs op on both backends from the same input; returns the max |cpu - cuda| / max |cpu|.
template <typename Op>
double compare(const std::vector<float>& in, size_t out_n, Op op) {
  std::vector<float> res[2];
  auto cpu = make_backend("cpu", 1);
  auto gpu = make_backend("cuda", 0);
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int i = 0; i < 2; ++i) {
    float* x = be[i]->alloc(int64_t(in.size()));
    float* y = be[i]->alloc(int64_t(out_n));
    // alloc'd memory is zeroed; fill x through a host->device path the backend has: embed of an
    // F32 table row.
    Tensor t;
    t.name = "in";
    t.type = TypeId::F32;
    t.ne = {int64_t(in.size()), 1};
    t.data = reinterpret_cast<const uint8_t*>(in.data());
    t.nbytes = in.size() * 4;
    const int32_t id = 0;
    be[i]->begin_step(0, 2);
    be[i]->embed(t, &id, 1, x);
    op(*be[i], x, y);
    be[i]->end_step();
    res[i].resize(out_n);
    be[i]->to_host(y, res[i].data(), int64_t(out_n));
  }
  double mx = 0, diff = 0;
  for (size_t i = 0; i < out_n; ++i) {
    mx = std::max(mx, double(std::fabs(res[0][i])));
    diff = std::max(diff, double(std::fabs(res[0][i] - res[1][i])));
  }
  EXPECT_GT(mx, 0.0);
  return diff / mx;
}

}  // namespace

TEST(CudaBackend, ElementwiseOpsMatchCpu) {
  BONSAI_REQUIRE_CUDA();
  const int64_t rows = 5, dim = 384;
  const auto in = random_vec(size_t(rows * dim), 1);
  const auto w = random_vec(size_t(dim), 2);
  EXPECT_LT(compare(in, in.size(), [&](Backend& b, float* x, float* y) { b.rmsnorm(x, w, rows, dim, 1e-6f, y); }), 1e-5);
  EXPECT_LT(compare(in, in.size(), [&](Backend& b, float* x, float* y) {
              b.copy(x, y, rows * dim);
              b.add_bias(y, w, rows);
              b.add(y, x, rows * dim);
            }), 1e-6);
  EXPECT_LT(compare(in, in.size(), [&](Backend& b, float* x, float* y) {
              b.copy(x, y, rows * dim);
              b.silu_mul(y, x, rows * dim);
            }), 1e-5);
  for (bool neox : {false, true})
    EXPECT_LT(compare(in, in.size(),
                      [&](Backend& b, float* x, float* y) {
                        b.copy(x, y, rows * dim);  // in place: compare reads y
                        b.rope(y, rows, 3, 128, 96, 7, 1e6f, neox);
                      }),
              1e-5);
}

TEST(CudaBackend, HadamardMatchesCpu) {
  BONSAI_REQUIRE_CUDA();
  const int64_t rows = 3, k = 512;
  HadamardSpec spec;
  spec.block = 128;
  const auto in = random_vec(size_t(rows * k), 3);
  // In place: each op copies x to y, which compare reads.
  const auto had = [&](bool inverse) {
    return compare(in, in.size(), [&](Backend& b, float* x, float* y) {
      b.copy(x, y, rows * k);
      b.hadamard(spec, y, rows, k, inverse);
    });
  };
  EXPECT_LT(had(false), 1e-5);
  std::vector<float> s(static_cast<size_t>(k));
  std::mt19937 rng(4);
  for (auto& v : s) v = (rng() & 1) ? 1.0f : -1.0f;
  spec.signs[k] = s;
  for (bool inv : {false, true}) EXPECT_LT(had(inv), 1e-5);
}

TEST(CudaBackend, AttentionOverTheCacheMatchesCpu) {
  BONSAI_REQUIRE_CUDA();
  const int64_t n_head = 8, n_head_kv = 2, hd = 128, kv = n_head_kv * hd, ctx = 70, pos0 = 61, n = 9;
  const auto kvals = random_vec(size_t(ctx * kv), 5), vvals = random_vec(size_t(ctx * kv), 6);
  const auto q = random_vec(size_t(n * n_head * hd), 7, 0.3f);
  std::vector<float> in = q;
  in.insert(in.end(), kvals.begin(), kvals.end());
  in.insert(in.end(), vvals.begin(), vvals.end());
  EXPECT_LT(compare(in, size_t(n * n_head * hd), [&](Backend& b, float* x, float* y) {
              void* kc = b.alloc_kv(ctx, n_head_kv, hd);
              void* vc = b.alloc_kv(ctx, n_head_kv, hd);
              b.store_kv(x + n * n_head * hd, kc, 0, ctx, kv);
              b.store_kv(x + n * n_head * hd + ctx * kv, vc, 0, ctx, kv);
              b.attention(x, kc, vc, n, pos0, n_head, n_head_kv, hd, y);
            }), 2e-3);
}

// stories260K: a prompt of 8 tokens then 24 decode steps (recorded and replayed as a graph); the
// logits of every step agree with the CPU's, and so does each greedy choice.
TEST(CudaSession, DecodeStepsMatchCpu) {
  BONSAI_REQUIRE_CUDA();
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const auto m = load_model(test::shared_file("models/stories260K/stories260K.gguf").string());
  auto cpu = make_backend("cpu", 1);
  auto gpu = make_backend("cuda", 0);
  Session sc(*m, *cpu, 64, 16), sg(*m, *gpu, 64, 16);
  const int64_t nv = m->cfg.n_vocab;
  std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 29892, 727, 471, 5, 77, 300, 12};  // 12 > 8: the wmma path
  for (auto& id : prompt) id %= int32_t(nv);
  std::vector<float> lc(static_cast<size_t>(nv)), lg(static_cast<size_t>(nv));
  sc.eval(prompt.data(), int64_t(prompt.size()), int64_t(prompt.size()) - 1, lc.data());
  sg.eval(prompt.data(), int64_t(prompt.size()), int64_t(prompt.size()) - 1, lg.data());
  for (int step = 0; step < 24; ++step) {
    double mx = 0, diff = 0;
    int32_t best = 0;
    for (int64_t i = 0; i < nv; ++i) {
      mx = std::max(mx, double(std::fabs(lc[size_t(i)])));
      diff = std::max(diff, double(std::fabs(lc[size_t(i)] - lg[size_t(i)])));
      if (lc[size_t(i)] > lc[size_t(best)]) best = int32_t(i);
    }
    EXPECT_LT(diff / mx, 5e-3) << "step " << step;
    int32_t best_g = 0;
    for (int64_t i = 0; i < nv; ++i)
      if (lg[size_t(i)] > lg[size_t(best_g)]) best_g = int32_t(i);
    EXPECT_EQ(best, best_g) << "step " << step;
    sc.eval(&best, 1, 0, lc.data());
    sg.eval(&best, 1, 0, lg.data());
  }
}

// A recorded step that repeats is replayed from one captured graph; a changed step is captured anew.
TEST(CudaLauncher, ReplaysOneGraphWhileTheStepRepeats) {
  BONSAI_REQUIRE_CUDA();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, 1024 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, 1024 * sizeof(float)), cudaSuccess);
  std::vector<float> host(1024, 1.0f), out(1024);
  cudaMemcpy(a, host.data(), 1024 * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemset(b, 0, 1024 * sizeof(float));
  {
    cuda::Launcher l(s);
    for (int i = 0; i < 3; ++i) {
      l.begin(true);
      cuda::add(l, b, a, 1024);
      l.end();
    }
    EXPECT_EQ(l.captures(), 1);
    l.begin(true);
    cuda::add(l, b, a, 512);
    l.end();
    EXPECT_EQ(l.captures(), 2);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  cudaMemcpy(out.data(), b, 1024 * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(out[0], 4.0f);     // three replays and the changed step
  EXPECT_EQ(out[1000], 3.0f);  // three replays
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(s);
}
