// quant::cuda::gptq_ternary against the CPU's quantize_ternary(…, Method::gptq, …).
//
//   Gram matrix              what must agree
//   diagonal (no feedback)   every code and scale, bit for bit: no error reaches another column,
//                            so the device's group fits see the CPU's weights and must choose
//                            as the CPU's rules do (quantize/group_rules.h, shared)
//   real (InputStats::add)   one pass: ≥ 99.5% of the codes, the output error within 0.5%; the
//                            whole method (refits, descent): ≥ 98% of the codes, the output
//                            error within 2%
//                            (float sums in another order move a weight on a rounding boundary,
//                            and the error feedback carries the flip along its row)
//   dead inputs              zero codes there, as the CPU
//   not positive definite    the CPU's Error
#include "quantize/cuda/gptq_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "calib_inputs.h"
#include "cuda_support.h"
#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/grid4.h"
#include "quantize/synthetic.h"
#include "quantize/ternary.h"

namespace bonsai::quant {
namespace {

// The Error texts the CPU's and the GPU's gptq refuse `in` with (empty: accepted).
std::pair<std::string, std::string> refusals(const MatrixIn& in) {
  std::string cpu, gpu;
  try {
    quantize_ternary(in, Method::gptq);
  } catch (const Error& e) {
    cpu = e.what();
  }
  try {
    cuda::quantize_gptq(in);
  } catch (const Error& e) {
    gpu = e.what();
  }
  return {cpu, gpu};
}

struct Layer {
  int64_t rows = 0, cols = 0;
  std::vector<float> w, imp;
  std::vector<double> g;
  MatrixIn in() const { return MatrixIn{w.data(), rows, cols, imp.data(), g.data()}; }
};

// Heavy-tailed weights and the statistics of 2·cols rows of correlated inputs.
Layer real_layer(int64_t rows, int64_t cols, uint32_t seed) {
  Layer l;
  l.rows = rows;
  l.cols = cols;
  l.w = test::random_weights(rows, cols, test::Dist::heavy, seed);
  const int64_t n = 2 * cols;
  const calib::InputStats st = bonsai::test::cpu_stats(bonsai::test::layer_inputs(n, cols, seed + 1), n, cols);
  l.g = st.mean_gram();
  l.imp = st.mean_sq();
  return l;
}

struct Agreement {
  double codes = 0, scales = 0;  // shares equal
  double e_cpu = 0, e_gpu = 0;   // relative output errors
};

Agreement compare(const Layer& l, const TernaryMatrix& cpu, const TernaryMatrix& gpu) {
  Agreement a;
  int64_t same = 0;
  for (size_t i = 0; i < cpu.codes.size(); ++i) same += cpu.codes[i] == gpu.codes[i];
  a.codes = double(same) / double(cpu.codes.size());
  same = 0;
  for (size_t i = 0; i < cpu.scales.size(); ++i) same += cpu.scales[i] == gpu.scales[i];
  a.scales = double(same) / double(cpu.scales.size());
  a.e_cpu = relative_output_error(l.in(), cpu.dequantize());
  a.e_gpu = relative_output_error(l.in(), gpu.dequantize());
  return a;
}

// What every result of gptq must be: codes on its grid, ternary scales ≥ 0, each group canonical.
void expect_well_formed(const TernaryMatrix& q, bool four, const std::string& what) {
  const int8_t top = four ? 2 : 1;
  for (const int8_t c : q.codes) ASSERT_TRUE(c >= -1 && c <= top) << what << ": code " << int(c);
  const int64_t groups = q.cols / kGroup;
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t d = q.scales[size_t(r * groups + g)];
      if (!four) {
        ASSERT_FALSE(fp16_to_f32(d) < 0.0f) << what << ": negative ternary scale";
      }
      std::vector<int8_t> c(q.codes.begin() + r * q.cols + g * kGroup, q.codes.begin() + r * q.cols + (g + 1) * kGroup);
      uint16_t dc = d;
      canonicalize_grid4(c.data(), kGroup, dc);
      ASSERT_EQ(dc, d) << what << ": group " << r << "," << g << " is not canonical";
    }
}

std::string label(int64_t rows, int64_t cols, bool four) {
  return std::to_string(rows) + "x" + std::to_string(cols) + (four ? " four levels" : " ternary");
}

TEST(GptqCuda, MatchesTheCpuOnARealGram) {
  BONSAI_REQUIRE_CUDA();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{256, 512}, {64, 1024}})
    for (const bool four : {false, true}) {
      const std::string what = label(rows, cols, four);
      const Layer l = real_layer(rows, cols, uint32_t(rows + cols + four));
      MethodOptions o;
      o.four_levels = four;
      const TernaryMatrix cpu = quantize_ternary(l.in(), Method::gptq, o);
      cuda::GptqDeviceReport rep;
      const TernaryMatrix gpu = cuda::quantize_gptq(l.in(), o, &rep);
      expect_well_formed(gpu, four, what);
      const Agreement a = compare(l, cpu, gpu);
      RecordProperty(what, "codes " + std::to_string(a.codes) + " scales " + std::to_string(a.scales) + " error cpu " +
                               std::to_string(a.e_cpu) + " gpu " + std::to_string(a.e_gpu) + " passes " +
                               std::to_string(rep.passes) + " factor_s " + std::to_string(rep.factor_s) +
                               " passes_s " + std::to_string(rep.passes_s) + " refit_s " + std::to_string(rep.refit_s));
      EXPECT_NEAR(a.e_gpu, a.e_cpu, 0.02 * a.e_cpu) << what;
      EXPECT_GE(a.codes, 0.98) << what;
      EXPECT_GE(rep.passes, 1) << what;
      // No atomics, no reductions in varying order: the device gives the same bytes every time.
      const TernaryMatrix again = cuda::quantize_gptq(l.in(), o);
      EXPECT_EQ(again.codes, gpu.codes) << what;
      EXPECT_EQ(again.scales, gpu.scales) << what;
    }
}

TEST(GptqCuda, OnePassMatchesTheCpu) {
  BONSAI_REQUIRE_CUDA();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{256, 512}, {64, 1024}})
    for (const bool four : {false, true}) {
      const std::string what = label(rows, cols, four);
      const Layer l = real_layer(rows, cols, uint32_t(3 * rows + cols + four));
      MethodOptions o;
      o.four_levels = four;
      o.refit_scales = false;  // GPTQ's column loop alone: the device's share of the work
      const TernaryMatrix cpu = quantize_ternary(l.in(), Method::gptq, o);
      const TernaryMatrix gpu = cuda::quantize_gptq(l.in(), o);
      expect_well_formed(gpu, four, what);
      const Agreement a = compare(l, cpu, gpu);
      RecordProperty(what, "codes " + std::to_string(a.codes) + " scales " + std::to_string(a.scales) + " error cpu " +
                               std::to_string(a.e_cpu) + " gpu " + std::to_string(a.e_gpu));
      EXPECT_GE(a.codes, 0.995) << what;
      EXPECT_GE(a.scales, 0.98) << what;
      EXPECT_NEAR(a.e_gpu, a.e_cpu, 0.005 * a.e_cpu) << what;
    }
}

// A diagonal Gram matrix makes U diagonal: no column's error reaches another, every group is
// fitted on its original weights with the damped diagonal as importance (uneven here), and the
// device must choose exactly the CPU's scales and codes. The weights include what tests a
// port's edges: all-zero groups, ties in |w|, one outlier, values near fp16's range and below its
// normal range, groups whose large weights are negative (the four-level grid's mirror).
TEST(GptqCuda, DiagonalGramIsBitExact) {
  BONSAI_REQUIRE_CUDA();
  const int64_t rows = 48, cols = 640;
  std::vector<float> w = test::random_weights(rows, cols, test::Dist::heavy, 5);
  auto group = [&](int64_t r, int64_t g) { return w.begin() + r * cols + g * kGroup; };
  std::fill(group(0, 0), group(0, 1), 0.0f);
  std::fill(group(1, 2), group(1, 3), 0.01f);
  for (int64_t k = 0; k < kGroup; k += 2) group(2, 1)[k] = -0.02f;
  group(3, 4)[7] = 60000.0f;
  for (int64_t k = 0; k < kGroup; ++k) group(4, 3)[k] *= 1e-4f;
  for (int64_t k = 0; k < kGroup; ++k) group(5, 0)[k] = -std::fabs(group(5, 0)[k]) * (k % 5 == 0 ? 4.0f : 1.0f);
  std::vector<double> g(size_t(cols * cols), 0.0);
  std::mt19937 rng(9);
  std::lognormal_distribution<double> ln(0.0, 1.5);
  for (int64_t j = 0; j < cols; ++j) g[size_t(j * cols + j)] = j % 97 == 3 ? 0.0 : ln(rng);  // some dead
  std::vector<float> imp(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) imp[size_t(j)] = float(g[size_t(j * cols + j)]);
  const MatrixIn in{w.data(), rows, cols, imp.data(), g.data()};
  for (const bool four : {false, true})
    for (const bool refit : {false, true}) {
      MethodOptions o;
      o.four_levels = four;
      o.refit_scales = refit;
      const std::string what = std::string(four ? "four levels" : "ternary") + (refit ? ", refit" : "");
      const TernaryMatrix cpu = quantize_ternary(in, Method::gptq, o);
      const TernaryMatrix gpu = cuda::quantize_gptq(in, o);
      EXPECT_EQ(gpu.scales, cpu.scales) << what;
      EXPECT_EQ(gpu.codes, cpu.codes) << what;
    }
}

TEST(GptqCuda, DeadInputsGetZeroCodes) {
  BONSAI_REQUIRE_CUDA();
  Layer l = real_layer(64, 512, 61);
  for (const int64_t dead : {0, 130, 511}) {
    for (int64_t j = 0; j < l.cols; ++j) l.g[size_t(dead * l.cols + j)] = l.g[size_t(j * l.cols + dead)] = 0.0;
    l.imp[size_t(dead)] = 0.0f;
  }
  const TernaryMatrix cpu = quantize_ternary(l.in(), Method::gptq);
  const TernaryMatrix gpu = cuda::quantize_gptq(l.in());
  for (int64_t r = 0; r < l.rows; ++r)
    for (const int64_t dead : {0, 130, 511}) EXPECT_EQ(gpu.codes[size_t(r * l.cols + dead)], 0) << r << "," << dead;
  const Agreement a = compare(l, cpu, gpu);
  EXPECT_TRUE(std::isfinite(a.e_gpu));
  EXPECT_NEAR(a.e_gpu, a.e_cpu, 0.02 * a.e_cpu);
}

// Indefinite but valid as far as quantize's checks go (finite, diagonal ≥ 0): the tridiagonal
// matrix with 1 on the diagonal and 0.9 beside it has eigenvalues down to 1 − 1.8.
TEST(GptqCuda, NotPositiveDefiniteRaisesTheCpusError) {
  BONSAI_REQUIRE_CUDA();
  const int64_t rows = 8, cols = 256;
  const std::vector<float> w = test::random_weights(rows, cols, test::Dist::normal, 3);
  std::vector<double> g(size_t(cols * cols), 0.0);
  for (int64_t j = 0; j < cols; ++j) {
    g[size_t(j * cols + j)] = 1.0;
    if (j + 1 < cols) g[size_t(j * cols + j + 1)] = g[size_t((j + 1) * cols + j)] = 0.9;
  }
  const MatrixIn in{w.data(), rows, cols, nullptr, g.data()};
  const auto [cpu_what, gpu_what] = refusals(in);
  EXPECT_NE(cpu_what.find("not positive definite"), std::string::npos) << cpu_what;
  EXPECT_EQ(gpu_what, cpu_what);
}

// The formula the pipeline refuses a matrix by: what the arrays held at once stays within it, so
// does what the device really gave (free memory before, less the least free at the peaks, the
// libraries' own allocations included), and everything is given back.
TEST(GptqCuda, DeviceMemoryStaysWithinTheFormula) {
  BONSAI_REQUIRE_CUDA();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{512, 2048}, {4096, 512}}) {
    const std::string what = std::to_string(rows) + "x" + std::to_string(cols);
    const Layer l = real_layer(rows, cols, uint32_t(rows + cols));
    MethodOptions o;
    o.gptq_passes = 2;
    o.descent_rounds = 1;
    cuda::quantize_gptq(l.in(), o);  // the context, the libraries' kernels: loaded once, not counted
    const int64_t before = cuda::device_free_bytes();
    cuda::GptqDeviceReport rep;
    cuda::quantize_gptq(l.in(), o, &rep);
    const int64_t after = cuda::device_free_bytes();
    const int64_t bound = cuda::gptq_device_bytes(rows, cols);
    RecordProperty(what, "peak " + std::to_string(rep.peak_bytes) + " used " + std::to_string(before - rep.min_free_bytes) +
                             " bound " + std::to_string(bound));
    EXPECT_LE(rep.peak_bytes, bound) << what;
    EXPECT_LE(before - rep.min_free_bytes, bound) << what;
    EXPECT_GE(after, before - (int64_t(2) << 20)) << what << ": device memory not given back";
  }
}

// Where the time goes on a layer of real size, on the device and on the CPU: one JSON line per
// configuration for scripts/cuda_check.sh (run with --gtest_also_run_disabled_tests).
TEST(GptqCuda, DISABLED_Speed) {
  BONSAI_REQUIRE_CUDA();
  const int64_t rows = 4096, cols = 4096;
  const Layer l = real_layer(rows, cols, 77);
  for (const bool refit : {false, true}) {
    MethodOptions o;
    o.refit_scales = refit;
    const auto t0 = std::chrono::steady_clock::now();
    const TernaryMatrix cpu = quantize_ternary(l.in(), Method::gptq, o);
    const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cuda::GptqDeviceReport rep;
    const auto t1 = std::chrono::steady_clock::now();
    const TernaryMatrix gpu = cuda::quantize_gptq(l.in(), o, &rep);
    const double gpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    const Agreement a = compare(l, cpu, gpu);
    std::printf("{\"kind\":\"gptq_cuda\",\"rows\":%lld,\"cols\":%lld,\"refit\":%s,\"cpu_s\":%.3f,\"gpu_s\":%.3f,"
                "\"factor_s\":%.3f,\"passes_s\":%.3f,\"refit_s\":%.3f,\"passes\":%d,\"peak_bytes\":%lld,"
                "\"bound_bytes\":%lld,\"codes_equal\":%.5f,\"error_cpu\":%.6f,\"error_gpu\":%.6f}\n",
                (long long)rows, (long long)cols, refit ? "true" : "false", cpu_s, gpu_s, rep.factor_s, rep.passes_s,
                rep.refit_s, rep.passes, (long long)rep.peak_bytes, (long long)cuda::gptq_device_bytes(rows, cols),
                a.codes, a.e_cpu, a.e_gpu);
    EXPECT_NEAR(a.e_gpu, a.e_cpu, 0.02 * a.e_cpu);
  }
}

// Without a device, and before one is asked for: the CPU's validation and the shape formula.
TEST(GptqCuda, InvalidInputIsTheCpusErrorBeforeAnyDevice) {
  const std::vector<float> w(8 * 200, 0.01f);
  std::vector<double> g(200 * 200, 0.0);
  for (int64_t j = 0; j < 200; ++j) g[size_t(j * 200 + j)] = 1.0;
  const MatrixIn in{w.data(), 8, 200, nullptr, g.data()};
  const auto [cpu_what, gpu_what] = refusals(in);
  EXPECT_NE(cpu_what.find("not a multiple of the group size"), std::string::npos) << cpu_what;
  EXPECT_EQ(gpu_what, cpu_what);
}

TEST(GptqCuda, DeviceBytesIsTheLargerPhase) {
  const int64_t lib = int64_t(64) << 20;  // cuBLAS's workspace and the libraries' share
  // A square layer and a wide one: the factorization's 16·cols² (H and L⁻¹ in double) dominates.
  EXPECT_EQ(cuda::gptq_device_bytes(4096, 4096), lib + 16 * 4096 * 4096 + 4096);
  EXPECT_EQ(cuda::gptq_device_bytes(4096, 14336), lib + 16 * int64_t(14336) * 14336 + 4096);
  // Many rows of few columns: the passes' arrays do.
  const int64_t rows = 1 << 20, cols = 128;
  EXPECT_EQ(cuda::gptq_device_bytes(rows, cols),
            lib + 4 * cols * cols + 5 * rows * cols + 4 * kGroup * rows + 2 * rows * (cols / kGroup) + 4 * cols);
}

TEST(GptqCuda, NoDeviceIsANamedError) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) GTEST_SKIP() << "a CUDA device is present";
  const std::vector<float> w(8 * 128, 0.01f);
  std::vector<double> g(128 * 128, 0.0);
  for (int64_t j = 0; j < 128; ++j) g[size_t(j * 128 + j)] = 1.0;
  try {
    cuda::quantize_gptq(MatrixIn{w.data(), 8, 128, nullptr, g.data()});
    ADD_FAILURE() << "no error without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bonsai::quant
