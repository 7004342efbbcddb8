// When the CPU kernels fork OpenMP threads.
#pragma once
#include <cstdint>

namespace bonsai::cpu {

// Multiply-adds below which a fork of threads costs more than it saves; below it the kernels do
// not open a parallel region at all (even a one-thread region costs about a microsecond).
constexpr int64_t kParallelWork = int64_t(1) << 16;

}  // namespace bonsai::cpu
