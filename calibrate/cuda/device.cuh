// What the calibration numerics on the GPU (calibrate/cuda, quantize/cuda) share: device arrays
// that count the bytes they hold (so a test can hold the memory formulas to the truth), one
// stream with its cuBLAS and cuSOLVER handles, and their errors as bonsai::Error naming the call.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cstdint>
#include <utility>

#include "formats/error.h"
#include "runtime/cuda/check.cuh"

namespace bonsai::cuda {

inline void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(cat("cuBLAS: ", what, ": ", cublasGetStatusString(s)));
}

inline void check_cusolver(cusolverStatus_t s, const char* what) {
  if (s != CUSOLVER_STATUS_SUCCESS) throw Error(cat("cuSOLVER: ", what, ": status ", int(s)));
}

}  // namespace bonsai::cuda

#define BONSAI_CUBLAS_CHECK(call) ::bonsai::cuda::check_cublas((call), #call)
#define BONSAI_CUSOLVER_CHECK(call) ::bonsai::cuda::check_cusolver((call), #call)

namespace bonsai::cuda {

// cuBLAS's workspace, given to each handle explicitly so that the memory formulas can count it
// (NVIDIA's recommendation for Hopper; the handle would otherwise allocate as much on its own).
constexpr int64_t kBlasWorkspaceBytes = int64_t(32) << 20;

// Bytes held by the arrays of one piece of work, now and at most, and the least free device
// memory seen at the points where the work called note_free() (its peaks): what the device really
// gave, the libraries' own allocations included, for tests to hold a memory formula to.
struct MemoryCount {
  int64_t now = 0, peak = 0;
  int64_t min_free = INT64_MAX;

  void note_free() {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess && int64_t(free) < min_free) min_free = int64_t(free);
  }
};

// Error naming `what` when there is no usable CUDA device: the first CUDA call would fail with a
// less helpful message.
inline void require_device(const char* what) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    throw Error(cat(what, ": no CUDA device (", e != cudaSuccess ? cudaGetErrorString(e) : "none found", ")"));
}

// n elements of T in device memory, counted in `count`; freed when it goes.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(int64_t n, MemoryCount& count, const char* what) : n_(n), count_(&count) {
    if (n <= 0) return;
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&p_), size_t(n) * sizeof(T));
    if (e != cudaSuccess) {
      p_ = nullptr;
      throw Error(cat("CUDA: cannot allocate ", bytes(), " bytes for ", what, ": ", cudaGetErrorString(e)));
    }
    count_->now += bytes();
    if (count_->now > count_->peak) count_->peak = count_->now;
  }
  DeviceArray(DeviceArray&& o) noexcept { *this = std::move(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(p_, o.p_);
      std::swap(n_, o.n_);
      std::swap(count_, o.count_);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { reset(); }

  void reset() {
    if (p_) {
      cudaFree(p_);  // an error here has nowhere to go; the next checked call reports it
      count_->now -= bytes();
    }
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  int64_t size() const { return n_; }
  int64_t bytes() const { return n_ * int64_t(sizeof(T)); }

 private:
  T* p_ = nullptr;
  int64_t n_ = 0;
  MemoryCount* count_ = nullptr;
};

// A stream of its own (or the caller's) and a cuBLAS handle on it with a counted workspace.
// cuBLAS's default math mode: float products stay float (no TF32), as the CPU computes them.
class BlasStream {
 public:
  BlasStream(MemoryCount& count, cudaStream_t external = nullptr) {
    if (external) {
      stream_ = external;
    } else {
      // A blocking stream: it waits for work on the legacy default stream, so rows a caller
      // produced there are complete before they are read.
      BONSAI_CUDA_CHECK(cudaStreamCreate(&stream_));
      own_stream_ = true;
    }
    try {
      BONSAI_CUBLAS_CHECK(cublasCreate(&blas_));
      BONSAI_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
      BONSAI_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
      workspace_ = DeviceArray<unsigned char>(kBlasWorkspaceBytes, count, "the cuBLAS workspace");
      BONSAI_CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_.get(), size_t(kBlasWorkspaceBytes)));
    } catch (...) {
      release();
      throw;
    }
  }
  BlasStream(const BlasStream&) = delete;
  BlasStream& operator=(const BlasStream&) = delete;
  ~BlasStream() { release(); }

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_; }
  void sync() const { BONSAI_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  void release() {
    if (stream_) cudaStreamSynchronize(stream_);  // no array may go while queued work reads it
    if (blas_) cublasDestroy(blas_);
    blas_ = nullptr;
    workspace_.reset();
    if (own_stream_ && stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  cublasHandle_t blas_ = nullptr;
  DeviceArray<unsigned char> workspace_;
};

// A cuSOLVER handle on a stream, for the one factorization that needs it.
class Solver {
 public:
  explicit Solver(cudaStream_t stream) {
    BONSAI_CUSOLVER_CHECK(cusolverDnCreate(&h_));
    const cusolverStatus_t s = cusolverDnSetStream(h_, stream);
    if (s != CUSOLVER_STATUS_SUCCESS) {
      cusolverDnDestroy(h_);
      check_cusolver(s, "cusolverDnSetStream");
    }
  }
  Solver(const Solver&) = delete;
  Solver& operator=(const Solver&) = delete;
  ~Solver() { cusolverDnDestroy(h_); }
  cusolverDnHandle_t get() const { return h_; }

 private:
  cusolverDnHandle_t h_ = nullptr;
};

// Host ↔ device copies on the stream (pageable host memory: they return when the data is safe).
template <typename T>
void upload(cudaStream_t s, T* dst, const T* src, int64_t n) {
  if (n > 0) BONSAI_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(T), cudaMemcpyHostToDevice, s));
}

template <typename T>
void download(cudaStream_t s, T* dst, const T* src, int64_t n) {
  if (n > 0) BONSAI_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost, s));
  BONSAI_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace bonsai::cuda
