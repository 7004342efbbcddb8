// Which kernels OpenBLAS runs the project's dense linear algebra on: the prompts' SGEMMs (float
// weights, attention; matmul.cpp, attention.cpp) and calibrate/'s and quantize/'s products and
// factorizations, and how every executable gets the better ones where OpenBLAS does not know the CPU.
#pragma once

namespace bonsai::cpu {

// OpenBLAS's name for the kernels it took as it loaded ("Haswell", "SkylakeX", ...).
const char* blas_kernels();

// The kernels to ask OpenBLAS for where it took a set without AVX2 on a CPU whose AVX2 path this
// library takes (avx2_usable): "SkylakeX" where it takes the AVX-512 one too (avx512_usable), else
// "Haswell"; nullptr where OpenBLAS's choice stands.
// OpenBLAS picks by the CPU's model number, and runs a model it does not know on its oldest
// x86-64 kernels: Debian 12's 0.3.21 took a 2-core Intel Xeon of model 207 for a "Prescott" (SSE3),
// where pp512 of Qwen3-1.7B in F16 ran 3-6x slower than on "SkylakeX" (docs/benchmarks.md,
// "OpenBLAS's kernels by the CPU's features").
//
// OpenBLAS reads OPENBLAS_CORETYPE only as it loads, and glibc restores the environment after an
// executable's preinit_array, so blas_kernels.cpp runs the program again (execv of /proc/self/exe,
// same arguments) with the variable set, from an initializer that runs before main. Every
// executable that links bonsai_cpu holds it (runtime/cpu/CMakeLists.txt): the CLI, the benchmarks
// and the tests compute on the same kernels, and so write the same bytes (a quantization's
// Cholesky factors and products depend on them). It does nothing where better_blas_kernels() is
// nullptr, where OPENBLAS_CORETYPE is set (by the user, or by the run that started this one), or
// where the exec fails.

}  // namespace bonsai::cpu
