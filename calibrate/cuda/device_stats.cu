#include "calibrate/cuda/device_stats.h"

#include <algorithm>

#include "calibrate/cuda/device.cuh"

namespace bonsai::calib::cuda {
namespace {

using bonsai::cuda::BlasStream;
using bonsai::cuda::DeviceArray;
using bonsai::cuda::MemoryCount;

// The x² sums of one add() in at most kSlices slices of rows, each column's slice summed in row
// order on one thread (coalesced: neighbouring threads read neighbouring columns), then the
// slices added in order: no atomics, so the sums do not change from run to run.
constexpr int64_t kSlices = 64, kMinSliceRows = 256, kThreads = 256;

__global__ void sum_sq_slices(const float* x, int64_t n, int64_t cols, int64_t slice_rows, double* partial) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = int64_t(blockIdx.y) * slice_rows, r1 = min(n, r0 + slice_rows);
  double s = 0.0;
  for (int64_t r = r0; r < r1; ++r) {
    const double v = x[r * cols + c];
    s += v * v;
  }
  partial[int64_t(blockIdx.y) * cols + c] = s;
}

__global__ void add_slices(const double* partial, int64_t slices, int64_t cols, double* sum_sq) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double s = 0.0;
  for (int64_t k = 0; k < slices; ++k) s += partial[k * cols + c];
  sum_sq[c] += s;
}

// sum[i + j·cols] += panel[i + j·cols] for the lower triangle (i ≥ j), column-major as SYRK
// writes it; the upper triangle is filled by symmetry on download.
__global__ void fold_lower(const float* panel, int64_t cols, double* sum) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= cols) return;
  for (int64_t j = blockIdx.y; j <= i; j += gridDim.y) sum[i + j * cols] += double(panel[i + j * cols]);
}

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

int64_t device_stats_bytes(int64_t cols, bool gram) {
  const int64_t sums = 8 * cols + 8 * kSlices * cols;
  return bonsai::cuda::kBlasWorkspaceBytes + sums + (gram ? 12 * cols * cols : 0);
}

struct DeviceStats::Impl {
  int64_t cols = 0;
  bool gram = false;
  MemoryCount count;
  BlasStream bs;
  DeviceArray<double> sum_sq, partial, gram_sum;  // cols, kSlices × cols, cols × cols (lower)
  DeviceArray<float> panel;                       // cols × cols: the rows since the last fold
  int64_t pending = 0;                            // rows in `panel`
  int64_t rows_seen = 0;

  Impl(int64_t c, bool g, cudaStream_t s) : cols(c), gram(g), bs(count, s) {
    sum_sq = DeviceArray<double>(cols, count, "the x² sums");
    partial = DeviceArray<double>(kSlices * cols, count, "the x² sums' slices");
    BONSAI_CUDA_CHECK(cudaMemsetAsync(sum_sq.get(), 0, size_t(sum_sq.bytes()), bs.stream()));
    if (gram) {
      gram_sum = DeviceArray<double>(cols * cols, count, "the Gram matrix's double sum");
      panel = DeviceArray<float>(cols * cols, count, "the Gram matrix's float product");
      BONSAI_CUDA_CHECK(cudaMemsetAsync(gram_sum.get(), 0, size_t(gram_sum.bytes()), bs.stream()));
    }
  }

  // Queued work may still read the arrays, which go before `bs` would wait for it.
  ~Impl() { cudaStreamSynchronize(bs.stream()); }

  void add_sum_sq(const float* x, int64_t n) {
    const int64_t slice_rows = std::max(kMinSliceRows, (n + kSlices - 1) / kSlices);
    const int64_t slices = (n + slice_rows - 1) / slice_rows;
    sum_sq_slices<<<dim3(blocks_for(cols), unsigned(slices)), kThreads, 0, bs.stream()>>>(x, n, cols, slice_rows,
                                                                                          partial.get());
    BONSAI_CUDA_CHECK(cudaGetLastError());
    add_slices<<<blocks_for(cols), kThreads, 0, bs.stream()>>>(partial.get(), slices, cols, sum_sq.get());
    BONSAI_CUDA_CHECK(cudaGetLastError());
  }

  // XᵀX of m rows (row-major m × cols: column-major cols × m) into the panel's lower triangle,
  // added to what it holds unless it was just folded.
  void syrk(const float* x, int64_t m) {
    const float one = 1.0f, beta = pending > 0 ? 1.0f : 0.0f;
    BONSAI_CUBLAS_CHECK(cublasSsyrk(bs.blas(), CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, int(cols), int(m), &one, x,
                                    int(cols), &beta, panel.get(), int(cols)));
    pending += m;
  }

  void fold() {
    if (pending == 0) return;
    const unsigned ys = unsigned(std::min<int64_t>(cols, 65535));
    fold_lower<<<dim3(blocks_for(cols), ys), kThreads, 0, bs.stream()>>>(panel.get(), cols, gram_sum.get());
    BONSAI_CUDA_CHECK(cudaGetLastError());
    pending = 0;
  }
};

DeviceStats::DeviceStats(int64_t cols, bool gram, CUstream_st* stream) {
  if (cols <= 0) throw Error(cat("DeviceStats: cols is ", cols, " (must be positive)"));
  bonsai::cuda::require_device("DeviceStats");
  impl_ = std::make_unique<Impl>(cols, gram, stream);
}

DeviceStats::~DeviceStats() = default;
DeviceStats::DeviceStats(DeviceStats&&) noexcept = default;
DeviceStats& DeviceStats::operator=(DeviceStats&&) noexcept = default;

void DeviceStats::add(const float* x, int64_t n) {
  Impl& s = *impl_;
  if (n < 0) throw Error(cat("DeviceStats::add: ", n, " rows"));
  if (n == 0) return;
  if (!x) throw Error(cat("DeviceStats::add: no rows given for ", n, " rows"));
  s.add_sum_sq(x, n);
  if (s.gram) {
    // Panels of at most kGramRows rows, as InputStats::add: the float sum never spans more.
    for (int64_t r0 = 0; r0 < n;) {
      const int64_t m = std::min(n - r0, calib::kGramRows - s.pending);
      s.syrk(x + r0 * s.cols, m);
      if (s.pending == calib::kGramRows) s.fold();
      r0 += m;
    }
  }
  s.rows_seen += n;
}

InputStats DeviceStats::download() {
  Impl& s = *impl_;
  if (s.gram) s.fold();
  InputStats st;
  st.cols = s.cols;
  st.rows_seen = s.rows_seen;
  st.sum_sq.resize(size_t(s.cols));
  bonsai::cuda::download(s.bs.stream(), st.sum_sq.data(), s.sum_sq.get(), s.cols);
  if (s.gram) {
    const int64_t n = s.cols;
    st.gram.resize(size_t(n * n));
    bonsai::cuda::download(s.bs.stream(), st.gram.data(), s.gram_sum.get(), n * n);
    // The column-major lower triangle (i ≥ j at i + j·n) reads row-major as the upper one:
    // mirror it into the lower.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) st.gram[size_t(i * n + j)] = st.gram[size_t(j * n + i)];
  }
  return st;
}

int64_t DeviceStats::cols() const { return impl_->cols; }
int64_t DeviceStats::rows_seen() const { return impl_->rows_seen; }
int64_t DeviceStats::device_bytes() const { return impl_->count.peak; }

}  // namespace bonsai::calib::cuda
