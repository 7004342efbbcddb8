// The inverse factor of GPTQ on the device, as the CPU computes it (quantize/gptq.cpp): with P
// the order reversal and PHP = L Lᵀ, U = P L⁻¹ P is the upper Cholesky factor of H⁻¹. One
// Cholesky (cuSOLVER potrf) and one triangular inverse (cuBLAS trsm), in double.
#include <algorithm>

#include "quantize/cuda/gptq_device.cuh"
#include "quantize/gptq_detail.h"

namespace bonsai::quant::cuda {
namespace {

// Columns per triangular solve of the inverse: block c0 solves L[c0:, c0:] X = [I; 0], so only
// the nonzero part of L⁻¹ is computed (n³/3 in all, as the CPU's lower_inverse).
constexpr int64_t kTrsmColumns = 512;
constexpr int kThreads = 256;

__global__ void set_diagonal(double* x, int64_t n, double v) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i + i * n] = v;
}

// U(n−1−i, n−1−j) = float(X(i, j)) for the lower X = L⁻¹ (i ≥ j), both column-major; U's other
// entries were zeroed. Reads and writes are contiguous along i.
__global__ void reverse_to_upper(const double* x, int64_t n, float* u) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  for (int64_t j = blockIdx.y; j <= i; j += gridDim.y) u[(n - 1 - i) + (n - 1 - j) * n] = float(x[i + j * n]);
}

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

// The lower Cholesky factor of the n × n `a` in place; false when it is not positive definite.
bool cholesky_lower(BlasStream& bs, MemoryCount& count, double* a, int64_t n) {
  const bonsai::cuda::Solver solver(bs.stream());
  int lwork = 0;
  BONSAI_CUSOLVER_CHECK(cusolverDnDpotrf_bufferSize(solver.get(), CUBLAS_FILL_MODE_LOWER, int(n), a, int(n), &lwork));
  DeviceArray<double> work(std::max(lwork, 1), count, "cuSOLVER's potrf workspace");
  DeviceArray<int> info(1, count, "cuSOLVER's potrf status");
  BONSAI_CUSOLVER_CHECK(cusolverDnDpotrf(solver.get(), CUBLAS_FILL_MODE_LOWER, int(n), a, int(n), work.get(), lwork,
                                         info.get()));
  int status = 0;
  bonsai::cuda::download(bs.stream(), &status, info.get(), 1);
  if (status < 0) throw Error(cat("cuSOLVER: cusolverDnDpotrf: argument ", -status, " is wrong"));
  return status == 0;  // > 0: the leading minor of that order is not positive definite
}

}  // namespace

int64_t factor_bytes(int64_t cols) {
  // H (then L) and L⁻¹ in double; potrf's workspace (freed before L⁻¹ is made) is far below
  // the 8·cols² of L⁻¹, and U (4·cols²) is made after H goes.
  return 16 * cols * cols + 4096;
}

DeviceArray<float> inverse_factor(BlasStream& bs, MemoryCount& count, std::vector<double>& h, int64_t n) {
  const cudaStream_t s = bs.stream();
  std::reverse(h.begin(), h.end());  // P H P: the whole column-major array read backwards
  DeviceArray<double> l(n * n, count, "GPTQ's damped H");
  bonsai::cuda::upload(s, l.get(), h.data(), n * n);
  if (!cholesky_lower(bs, count, l.get(), n)) gptq_detail::throw_not_positive_definite();
  // The diagonal of L, strided by n + 1: the CPU's check that the factor is not singular.
  std::vector<double> diag(static_cast<size_t>(n));
  BONSAI_CUDA_CHECK(cudaMemcpy2DAsync(diag.data(), sizeof(double), l.get(), size_t(n + 1) * sizeof(double),
                                      sizeof(double), size_t(n), cudaMemcpyDeviceToHost, s));
  bs.sync();
  for (const double d : diag)
    if (!(d != 0.0)) gptq_detail::throw_singular_factor();

  DeviceArray<double> x(n * n, count, "GPTQ's inverse Cholesky factor");
  BONSAI_CUDA_CHECK(cudaMemsetAsync(x.get(), 0, size_t(x.bytes()), s));
  set_diagonal<<<blocks_for(n), kThreads, 0, s>>>(x.get(), n, 1.0);
  BONSAI_CUDA_CHECK(cudaGetLastError());
  const double one = 1.0;
  for (int64_t c0 = 0; c0 < n; c0 += kTrsmColumns) {
    const int64_t off = c0 + c0 * n;
    BONSAI_CUBLAS_CHECK(cublasDtrsm(bs.blas(), CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                                    CUBLAS_DIAG_NON_UNIT, int(n - c0), int(std::min(kTrsmColumns, n - c0)), &one,
                                    l.get() + off, int(n), x.get() + off, int(n)));
  }
  bs.sync();
  count.note_free();  // the factorization's peak: L and L⁻¹
  l.reset();

  DeviceArray<float> u(n * n, count, "GPTQ's inverse factor U");
  BONSAI_CUDA_CHECK(cudaMemsetAsync(u.get(), 0, size_t(u.bytes()), s));
  reverse_to_upper<<<dim3(blocks_for(n), unsigned(std::min<int64_t>(n, 65535))), kThreads, 0, s>>>(x.get(), n,
                                                                                                  u.get());
  BONSAI_CUDA_CHECK(cudaGetLastError());
  bs.sync();
  return u;
}

}  // namespace bonsai::quant::cuda
