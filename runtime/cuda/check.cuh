// CUDA errors become bonsai::Error with the call that failed, like every other error in bonsai.
#pragma once
#include <cuda_runtime.h>

#include "formats/error.h"

namespace bonsai::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(cat("CUDA: ", what, ": ", cudaGetErrorString(e)));
}

}  // namespace bonsai::cuda

#define BONSAI_CUDA_CHECK(call) ::bonsai::cuda::check((call), #call)
