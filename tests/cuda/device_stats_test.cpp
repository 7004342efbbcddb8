// calib::cuda::DeviceStats against InputStats::add on the same rows: the same fields with the
// same meaning, the x² sums to double rounding, the Gram matrix to float rounding (both are
// float products of at most kGramRows rows folded into double sums).
#include "calibrate/cuda/device_stats.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "calib_inputs.h"
#include "cuda_support.h"
#include "formats/error.h"

namespace bonsai::calib {
namespace {

struct DeviceRows {
  float* p = nullptr;
  explicit DeviceRows(const std::vector<float>& x) {
    EXPECT_EQ(cudaMalloc(&p, x.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceRows() { cudaFree(p); }
};

// Rows in batches of uneven sizes, so that the float products cross the kGramRows boundary
// inside a batch and gather several batches each.
InputStats device_stats(const std::vector<float>& x, int64_t n, int64_t cols, bool gram, int64_t* held = nullptr) {
  const DeviceRows rows(x);
  cuda::DeviceStats st(cols, gram);
  const int64_t batches[] = {1000, 7777, 1, 4096};
  int64_t r0 = 0;
  for (int b = 0; r0 < n; ++b) {
    const int64_t m = std::min(batches[b % 4], n - r0);
    st.add(rows.p + r0 * cols, m);
    r0 += m;
  }
  EXPECT_EQ(st.rows_seen(), n);
  InputStats out = st.download();
  if (held) *held = st.device_bytes();
  return out;
}

TEST(DeviceStats, GramMatchesInputStatsAdd) {
  BONSAI_REQUIRE_CUDA();
  const int64_t n = 2 * kGramRows + 3000, cols = 320;
  const std::vector<float> x = test::layer_inputs(n, cols, 17);
  const InputStats cpu = test::cpu_stats(x, n, cols);
  int64_t held = 0;
  const InputStats gpu = device_stats(x, n, cols, true, &held);
  ASSERT_EQ(gpu.cols, cols);
  ASSERT_EQ(gpu.rows_seen, n);
  ASSERT_EQ(gpu.sum_sq.size(), size_t(cols));
  ASSERT_EQ(gpu.gram.size(), size_t(cols * cols));
  for (int64_t j = 0; j < cols; ++j)
    EXPECT_NEAR(gpu.sum_sq[size_t(j)], cpu.sum_sq[size_t(j)], 1e-12 * cpu.sum_sq[size_t(j)]) << "column " << j;
  // Each entry within float rounding of sums of 16384 products, relative to √(G_ii G_jj) (which
  // bounds the sum of their magnitudes): 4e-7 at most between two CPU runs of other panel
  // sizes. A misplaced entry or a missed fold is off by far more, a row left out by ~1/n = 3e-5.
  double worst = 0;
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double bound = std::sqrt(cpu.gram[size_t(i * cols + i)] * cpu.gram[size_t(j * cols + j)]);
      const double d = std::fabs(gpu.gram[size_t(i * cols + j)] - cpu.gram[size_t(i * cols + j)]) / bound;
      worst = std::max(worst, d);
      ASSERT_LE(d, 1e-5) << "entry " << i << "," << j;
      ASSERT_EQ(gpu.gram[size_t(i * cols + j)], gpu.gram[size_t(j * cols + i)]) << "not symmetric at " << i << "," << j;
    }
  RecordProperty("worst_relative_difference", std::to_string(worst));
  // The two paths over the same rows: the Gram diagonal is the x² sums, to float rounding.
  for (int64_t j = 0; j < cols; ++j)
    EXPECT_NEAR(gpu.gram[size_t(j * cols + j)], gpu.sum_sq[size_t(j)], 1e-5 * gpu.sum_sq[size_t(j)]) << "column " << j;
  EXPECT_LE(held, cuda::device_stats_bytes(cols, true));
}

TEST(DeviceStats, WithoutTheGramMatrixOnlyTheSquares) {
  BONSAI_REQUIRE_CUDA();
  const int64_t n = 5000, cols = 256;
  const std::vector<float> x = test::layer_inputs(n, cols, 23);
  const InputStats cpu = test::cpu_stats(x, n, cols);
  int64_t held = 0;
  const InputStats gpu = device_stats(x, n, cols, false, &held);
  EXPECT_TRUE(gpu.gram.empty());
  EXPECT_EQ(gpu.rows_seen, n);
  for (int64_t j = 0; j < cols; ++j)
    EXPECT_NEAR(gpu.sum_sq[size_t(j)], cpu.sum_sq[size_t(j)], 1e-12 * cpu.sum_sq[size_t(j)]) << "column " << j;
  const std::vector<float> mean = gpu.mean_sq(), want = cpu.mean_sq();
  for (int64_t j = 0; j < cols; ++j) EXPECT_FLOAT_EQ(mean[size_t(j)], want[size_t(j)]);
  EXPECT_LE(held, cuda::device_stats_bytes(cols, false));
}

TEST(DeviceStats, NothingAddedIsZeroSums) {
  BONSAI_REQUIRE_CUDA();
  cuda::DeviceStats st(128, true);
  st.add(nullptr, 0);
  const InputStats s = st.download();
  EXPECT_EQ(s.rows_seen, 0);
  EXPECT_EQ(s.sum_sq, std::vector<double>(128, 0.0));
  EXPECT_EQ(s.gram, std::vector<double>(128 * 128, 0.0));
  EXPECT_THROW(st.add(nullptr, -1), Error);
}

TEST(DeviceStats, BadColumnsAreAnErrorBeforeTheDevice) {
  EXPECT_THROW(cuda::DeviceStats(0, true), Error);
}

}  // namespace
}  // namespace bonsai::calib
