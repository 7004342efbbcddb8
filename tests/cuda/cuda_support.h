// CUDA tests run only where a GPU is: elsewhere they are skipped with the reason.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#define BONSAI_REQUIRE_CUDA()                                                                    \
  do {                                                                                           \
    int n_ = 0;                                                                                  \
    if (cudaGetDeviceCount(&n_) != cudaSuccess || n_ == 0) GTEST_SKIP() << "no CUDA device";    \
  } while (0)
