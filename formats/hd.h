// One macro so the block layouts and their decoders compile for both the C++ compiler and nvcc.
#pragma once
#if defined(__CUDACC__)
#define BONSAI_HD __host__ __device__
#else
#define BONSAI_HD
#endif
