// CUDA matmul paths against the CPU scalar reference (cpu::matmul_ref), every weight type, random
// encoded weights. Tolerances per output y[t, r] (W decoded by to_float, x the activations):
//
//   path   types           |cuda - ref| <=
//   dp4a,  quantized       sum over weight blocks b of amax_b(x)/254 * sum_{k in b} |W_rk|  +  1e-5 * S_r
//   blk                                                                                     (the same)
//   fma    F32/F16/BF16    1e-5 * S_r
//   wmma   every type      2^-10 * S_r  +  1e-6            (fp16 inputs: each product within ~2^-11)
//
// with S_r = sum_k |W_rk x_k|. dp4a and blk round activations to int8 per weight block (|x - xq| <=
// amax/254); the rest is float rounding of short chains.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda_support.h"
#include "formats/types.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cuda/matmul.cuh"
#include "runtime/cuda/ops.cuh"

using namespace bonsai;

namespace {

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t n) { cudaMalloc(&p, n); }
  ~Dev() { cudaFree(p); }
};

void check_path(TypeId type, const char* path, int64_t n) {
  const TypeTraits& tt = traits(type);
  const int64_t rows = 67, cols = 512;
  std::mt19937 rng(uint32_t(int(type) * 131 + n));
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> wf(size_t(rows * cols)), x(size_t(n * cols));
  for (auto& v : wf) v = nd(rng);
  for (auto& v : x) v = nd(rng) * 20.0f;
  const uint64_t rb = *row_bytes(type, uint64_t(cols));
  std::vector<uint8_t> wb(size_t(rb * rows));
  for (int64_t r = 0; r < rows; ++r) tt.from_float(&wf[size_t(r * cols)], &wb[size_t(r * rb)], cols);
  std::vector<float> wd(wf.size());
  for (int64_t r = 0; r < rows; ++r) tt.to_float(&wb[size_t(r * rb)], &wd[size_t(r * cols)], cols);

  Tensor t;
  t.name = "w";
  t.type = type;
  t.ne = {cols, rows};
  t.data = wb.data();
  t.nbytes = wb.size();
  std::vector<float> ref(size_t(n * rows)), got(ref.size());
  cpu::matmul_ref(t, x.data(), n, ref.data());

  Dev dw(wb.size()), dx(x.size() * 4), dy(got.size() * 4);
  cudaMemcpy(dw.p, wb.data(), wb.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  cudaStream_t s;
  cudaStreamCreate(&s);
  {
    cuda::Launcher launch(s);
    cuda::ActScratch scratch;
    cuda::matmul_path(launch, path, {type, static_cast<const uint8_t*>(dw.p), rows, cols, int64_t(rb)},
                      static_cast<const float*>(dx.p), n, static_cast<float*>(dy.p), scratch);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  cudaStreamDestroy(s);
  cudaMemcpy(got.data(), dy.p, got.size() * 4, cudaMemcpyDeviceToHost);

  const std::string p = path;
  const int qk = tt.block_elems;
  int bad = 0;
  for (int64_t ti = 0; ti < n; ++ti)
    for (int64_t r = 0; r < rows; ++r) {
      double s_abs = 0, act = 0;
      for (int64_t b = 0; b < cols / qk; ++b) {
        double amax = 0, wabs = 0;
        for (int64_t k = b * qk; k < (b + 1) * qk; ++k) {
          amax = std::max(amax, double(std::fabs(x[size_t(ti * cols + k)])));
          wabs += std::fabs(wd[size_t(r * cols + k)]);
          s_abs += std::fabs(double(wd[size_t(r * cols + k)]) * x[size_t(ti * cols + k)]);
        }
        act += amax / 254.0 * wabs;
      }
      const double tol = p.rfind("dp4a", 0) == 0 || p.rfind("blk", 0) == 0 ? act + 1e-5 * s_abs : p == "fma" ? 1e-5 * s_abs : s_abs / 1024.0 + 1e-6;
      const double diff = std::fabs(double(got[size_t(ti * rows + r)]) - ref[size_t(ti * rows + r)]);
      if (!(diff <= tol) && bad++ < 3)
        ADD_FAILURE() << tt.name << " " << path << " n=" << n << " t=" << ti << " r=" << r << ": cuda "
                      << got[size_t(ti * rows + r)] << " ref " << ref[size_t(ti * rows + r)] << " tol " << tol;
    }
}

const TypeId kQuant[] = {TypeId::Q8_0, TypeId::Q4_0, TypeId::Q1_0, TypeId::Q2_0, TypeId::TQ1_0, TypeId::TQ2_0,
                         TypeId::PQ2_0, TypeId::PTQ1_0};
const TypeId kFloat[] = {TypeId::F32, TypeId::F16, TypeId::BF16};

}  // namespace

TEST(CudaMatmul, Dp4aPathMatchesReferenceForEveryQuantizedType) {
  BONSAI_REQUIRE_CUDA();
  for (TypeId t : kQuant) {
    for (int64_t n : {1, 3, 8}) check_path(t, "dp4a", n);
    for (const char* p : {"dp4a:1", "blk:1", "blk:2", "blk:4"}) check_path(t, p, 1);
    check_path(t, "dp4a:1", 5);
  }
}

TEST(CudaMatmul, FmaPathMatchesReferenceForEveryFloatType) {
  BONSAI_REQUIRE_CUDA();
  for (TypeId t : kFloat)
    for (int64_t n : {1, 8}) check_path(t, "fma", n);
}

TEST(CudaMatmul, WmmaPathMatchesReferenceForEveryType) {
  BONSAI_REQUIRE_CUDA();
  for (TypeId t : kQuant) check_path(t, "wmma", 70);
  for (TypeId t : kFloat) check_path(t, "wmma", 9);
}

TEST(CudaMatmul, OneTokenPathIsTheFastestCandidateThatRuns) {
  BONSAI_REQUIRE_CUDA();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (TypeId t : {TypeId::PTQ1_0, TypeId::Q8_0, TypeId::F16}) {
    const int64_t rows = 67, cols = 512, rb = int64_t(*row_bytes(t, uint64_t(cols)));
    Dev dw(size_t(rows * rb));
    cudaMemset(dw.p, 0x11, size_t(rows * rb));
    const std::string p =
        cuda::fastest_one_token_path(s, {t, static_cast<const uint8_t*>(dw.p), rows, cols, rb});
    if (t == TypeId::F16) {
      EXPECT_EQ(p, "fma");
    } else {
      EXPECT_TRUE(p == "dp4a:1" || p == "dp4a:2" || p == "blk:1" || p == "blk:2" || p == "blk:4") << p;
      check_path(t, p.c_str(), 1);
    }
  }
  cudaStreamDestroy(s);
}

// Not a test: one-token decode speed of each path over a 1 GiB weight matrix, in GB/s of weight
// bytes and as a share of the device's read bandwidth measured in the same run. The GPU check
// (scripts/cuda_check.sh) runs it with --gtest_also_run_disabled_tests; one JSON line a case.
TEST(CudaMatmul, DISABLED_Throughput) {
  BONSAI_REQUIRE_CUDA();
  const double bw = cuda::read_bandwidth_gbs(size_t(2) << 30);
  const int64_t cols = 4096;
  struct Case {
    TypeId type;
    const char* path;
  };
  const Case cases[] = {{TypeId::PTQ1_0, "dp4a:2"}, {TypeId::PTQ1_0, "blk:2"}, {TypeId::PTQ1_0, "blk:4"},
                        {TypeId::PQ2_0, "blk:2"},   {TypeId::PQ2_0, "blk:4"},   {TypeId::TQ2_0, "blk:4"},
                        {TypeId::Q4_0, "blk:2"},    {TypeId::Q4_0, "blk:4"},    {TypeId::Q8_0, "blk:2"},
                        {TypeId::Q8_0, "blk:4"},    {TypeId::F16, "fma"}};
  Dev dx(cols * 4), dy(size_t(1) << 28);
  cudaMemset(dx.p, 0, cols * 4);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (const Case& c : cases) {
    const int64_t rb = int64_t(*row_bytes(c.type, uint64_t(cols))), rows = (int64_t(1) << 30) / rb;
    Dev dw(size_t(rows * rb));
    ASSERT_NE(dw.p, nullptr);
    cudaMemset(dw.p, 0x11, size_t(rows * rb));  // 0x1111: a finite fp16 scale; any codes
    cuda::Launcher launch(s);
    cuda::ActScratch scratch;
    const cuda::DeviceMatrix m{c.type, static_cast<const uint8_t*>(dw.p), rows, cols, rb};
    const auto run = [&] {
      cuda::matmul_path(launch, c.path, m, static_cast<const float*>(dx.p), 1, static_cast<float*>(dy.p), scratch);
    };
    for (int i = 0; i < 3; ++i) run();
    const int reps = 20;
    cudaEventRecord(e0, s);
    for (int i = 0; i < reps; ++i) run();
    cudaEventRecord(e1, s);
    ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    const double gbs = double(rows * rb) * reps / (ms * 1e-3) / 1e9;
    std::printf("{\"kind\":\"matvec\",\"type\":\"%s\",\"path\":\"%s\",\"rows\":%lld,\"cols\":%lld,\"us\":%.1f,"
                "\"gbs\":%.1f,\"read_bw_gbs\":%.1f,\"pct_of_bw\":%.1f}\n",
                traits(c.type).name, c.path, (long long)rows, (long long)cols, ms * 1e3 / reps, gbs, bw,
                100.0 * gbs / bw);
  }
  // The shapes of a Qwen3-8B decode step: the path the backend picks for each, timed the same way
  // but with the L2 cache flushed before each run (each matrix alone would fit in it).
  Dev flush(size_t(256) << 20);
  struct Shape {
    TypeId type;
    int64_t rows, cols;
  };
  const Shape shapes[] = {{TypeId::PTQ1_0, 4096, 4096},  {TypeId::PTQ1_0, 1024, 4096}, {TypeId::PTQ1_0, 12288, 4096},
                          {TypeId::PTQ1_0, 4096, 12288}, {TypeId::PQ2_0, 4096, 4096},  {TypeId::PQ2_0, 12288, 4096},
                          {TypeId::PQ2_0, 4096, 12288},  {TypeId::Q4_0, 4096, 4096},   {TypeId::Q4_0, 12288, 4096},
                          {TypeId::Q8_0, 151936, 4096}};
  for (const Shape& sh : shapes) {
    const int64_t rb = int64_t(*row_bytes(sh.type, uint64_t(sh.cols)));
    Dev dw(size_t(sh.rows * rb));
    cudaMemset(dw.p, 0x11, size_t(sh.rows * rb));
    const cuda::DeviceMatrix m{sh.type, static_cast<const uint8_t*>(dw.p), sh.rows, sh.cols, rb};
    const std::string path = cuda::fastest_one_token_path(s, m);
    cuda::Launcher launch(s);
    cuda::ActScratch scratch;
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      cudaMemsetAsync(flush.p, rep, size_t(256) << 20, s);
      cudaEventRecord(e0, s);
      cuda::matmul_path(launch, path.c_str(), m, static_cast<const float*>(dx.p), 1, static_cast<float*>(dy.p),
                        scratch);
      cudaEventRecord(e1, s);
      ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      best = std::min(best, ms);
    }
    const double gbs = double(sh.rows * rb) / (best * 1e-3) / 1e9;
    std::printf("{\"kind\":\"matvec_shape\",\"type\":\"%s\",\"rows\":%lld,\"cols\":%lld,\"path\":\"%s\","
                "\"us\":%.1f,\"gbs\":%.1f,\"pct_of_bw\":%.1f}\n",
                traits(sh.type).name, (long long)sh.rows, (long long)sh.cols, path.c_str(), best * 1e3, gbs,
                100.0 * gbs / bw);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
}
