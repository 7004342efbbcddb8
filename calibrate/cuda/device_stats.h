// Activation statistics accumulated on the GPU: rows of a matrix product's input already in device
// memory become the sums of calib::InputStats (E[x²] and, when asked, the Gram matrix), so that
// everything downstream (round_to_f32, save_stats, GPTQ) is unchanged.
//
// The same numerics as InputStats::add: x² summed in double; the Gram matrix as float products
// (cuBLAS SYRK) of at most kGramRows rows, each folded into a double sum, so the two agree to
// float rounding. Rows may come in batches of any size: they are gathered into one float product
// until it holds kGramRows rows (the CPU runner gathers them on the host for the same reason).
//
// No CUDA header here: plain C++ can call it. It exists only in builds with BONSAI_CUDA=ON
// (library bonsai_calibrate_cuda, which gives whoever links it BONSAI_HAVE_CALIBRATE_CUDA=1); a
// caller guards its calls with `#ifdef BONSAI_HAVE_CALIBRATE_CUDA`.
#pragma once
#include <cstdint>
#include <memory>

#include "calibrate/stats.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace bonsai::calib::cuda {

// Device bytes a DeviceStats of `cols` columns holds (the cuBLAS workspace included): compare
// with the device's free memory before starting.
int64_t device_stats_bytes(int64_t cols, bool gram);

class DeviceStats {
 public:
  // Error without a CUDA device, or when the device has not the memory. Work is queued on
  // `stream`, so rows produced on that stream need no other wait; null: a stream of its own that
  // waits for the legacy default stream's work.
  DeviceStats(int64_t cols, bool gram, CUstream_st* stream = nullptr);
  ~DeviceStats();
  DeviceStats(DeviceStats&&) noexcept;  // a moved-from one may only be assigned or destroyed
  DeviceStats& operator=(DeviceStats&&) noexcept;
  DeviceStats(const DeviceStats&) = delete;
  DeviceStats& operator=(const DeviceStats&) = delete;

  // n rows of cols floats, row-major, in device memory on the current device. Asynchronous on the
  // stream: the rows must stay unchanged until the stream has passed this call (for a caller
  // that writes the next rows on the same stream, they do).
  void add(const float* x_device, int64_t n);

  // The sums so far: cols, rows_seen, sum_sq and (when collected) the symmetric Gram sum, as
  // InputStats::add leaves them. Waits for the queued work.
  InputStats download();

  int64_t cols() const;
  int64_t rows_seen() const;
  int64_t device_bytes() const;  // the most it has held (device_stats_bytes promises a bound)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bonsai::calib::cuda
