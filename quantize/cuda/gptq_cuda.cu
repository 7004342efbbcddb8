#include "quantize/cuda/gptq_cuda.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <vector>

#include "quantize/cuda/gptq_device.cuh"
#include "quantize/gptq_detail.h"

namespace bonsai::quant::cuda {
namespace {

// The libraries' state that no counted array holds (cuSOLVER's handle and its own cuBLAS, the
// allocator's rounding of each array to its granularity), bounded generously.
constexpr int64_t kLibraryBytes = int64_t(32) << 20;

std::atomic<int64_t> g_lowest_free{INT64_MAX};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int64_t gptq_device_bytes(int64_t rows, int64_t cols) {
  return bonsai::cuda::kBlasWorkspaceBytes + kLibraryBytes + std::max(factor_bytes(cols), pass_bytes(rows, cols));
}

int64_t device_free_bytes() {
  bonsai::cuda::require_device("quantize: gptq on CUDA");
  size_t free = 0, total = 0;
  BONSAI_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return int64_t(free);
}

int64_t lowest_free_seen() {
  const int64_t v = g_lowest_free.load();
  return v == INT64_MAX ? -1 : v;
}

void gptq_ternary(const MatrixIn& in, const MethodOptions& opts, TernaryMatrix& out, GptqDeviceReport* report) {
  bonsai::cuda::require_device("quantize: gptq on CUDA");
  const int64_t rows = in.rows, cols = in.cols;
  GptqDeviceReport rep;
  MemoryCount count;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<char> dead;
  std::vector<float> importance;
  {
    BlasStream bs(count);
    DeviceArray<float> u;
    {
      std::vector<double> h = gptq_detail::damped_hessian(in, opts.gptq_damp, dead, importance);
      u = inverse_factor(bs, count, h, cols);
    }
    rep.factor_s = seconds_since(t0);

    // Every pass starts from the same weights, the dead inputs' zeroed (as the CPU's pass).
    std::vector<float> w0(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) w0[size_t(r * cols + j)] = dead[size_t(j)] ? 0.0f : in.w[r * cols + j];
    PassArrays arrays(rows, cols, importance, bs, count);
    const auto t1 = std::chrono::steady_clock::now();
    gptq_detail::run_passes(in, opts, out, [&](bool fixed) {
      const auto tp = std::chrono::steady_clock::now();
      run_pass(bs, u.get(), arrays, w0.data(), rows, cols, fixed, opts.four_levels, out);
      if (rep.passes == 0) count.note_free();  // the passes' peak, cuBLAS's lazy state included
      rep.passes_s += seconds_since(tp);
      ++rep.passes;
    });
    rep.refit_s = seconds_since(t1) - rep.passes_s;
  }
  rep.peak_bytes = count.peak;
  rep.min_free_bytes = count.min_free;
  for (int64_t cur = g_lowest_free.load(); rep.min_free_bytes < cur && !g_lowest_free.compare_exchange_weak(cur, rep.min_free_bytes);) {
  }
  if (report) *report = rep;
}

TernaryMatrix quantize_gptq(const MatrixIn& in, const MethodOptions& opts, GptqDeviceReport* report) {
  validate_matrix_in(in, Method::gptq, opts);
  TernaryMatrix out;
  out.rows = in.rows;
  out.cols = in.cols;
  out.codes.assign(size_t(in.rows * in.cols), 0);
  out.scales.assign(size_t(in.rows * (in.cols / kGroup)), 0);
  gptq_ternary(in, opts, out, report);
  return out;
}

}  // namespace bonsai::quant::cuda
