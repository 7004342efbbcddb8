#include "runtime/cpu/blas_kernels.h"

#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <initializer_list>

namespace bonsai::cpu {

const char* blas_kernels() { return openblas_get_corename(); }

const char* better_blas_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx2) return nullptr;
  // OpenBLAS's (0.3.21) kernel sets with AVX2 or more.
  for (const char* known : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
    if (strcasecmp(blas_kernels(), known) == 0) return nullptr;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512cd");
  return avx512 ? "SkylakeX" : "Haswell";
#else
  return nullptr;
#endif
}

void rerun_with_better_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const char* kernels = better_blas_kernels();
  if (!kernels || setenv("OPENBLAS_CORETYPE", kernels, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // the exec failed: go on as this run is
}

}  // namespace bonsai::cpu
