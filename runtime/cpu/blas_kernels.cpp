#include "runtime/cpu/blas_kernels.h"

#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <initializer_list>

#if BONSAI_CPU_AVX2
#include "runtime/cpu/kernels_avx512.h"
#endif

namespace bonsai::cpu {

const char* blas_kernels() { return openblas_get_corename(); }

const char* better_blas_kernels() {
#if BONSAI_CPU_AVX2
  if (!avx2_usable()) return nullptr;
  // OpenBLAS's (0.3.21) kernel sets with AVX2 or more.
  for (const char* known : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
    if (strcasecmp(blas_kernels(), known) == 0) return nullptr;
  return avx512_usable() ? "SkylakeX" : "Haswell";
#else
  return nullptr;
#endif
}

}  // namespace bonsai::cpu

// Runs before main, after the shared libraries (OpenBLAS among them) have loaded; glibc passes an
// initializer the program's arguments. The linker keeps this object in every executable that links
// bonsai_cpu (--undefined=bonsai_cpu_blas_kernels_rerun in runtime/cpu/CMakeLists.txt).
extern "C" __attribute__((constructor, used)) void bonsai_cpu_blas_kernels_rerun(int, char** argv, char**) {
  if (!argv || !argv[0] || std::getenv("OPENBLAS_CORETYPE")) return;
  const char* kernels = bonsai::cpu::better_blas_kernels();
  if (!kernels || setenv("OPENBLAS_CORETYPE", kernels, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // the exec failed: go on as this run is
}
