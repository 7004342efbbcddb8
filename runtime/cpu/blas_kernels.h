// Which kernels OpenBLAS runs the prompts' SGEMMs on (float weights, attention; matmul.cpp,
// attention.cpp), and a way to better them where it does not know the CPU.
#pragma once

namespace bonsai::cpu {

// OpenBLAS's name for the kernels it took as it loaded ("Haswell", "SkylakeX", ...).
const char* blas_kernels();

// The kernels to ask OpenBLAS for where it took a set without AVX2 on a CPU with AVX2 and FMA:
// "SkylakeX" with AVX-512 (F, BW, VL, DQ, CD), else "Haswell"; nullptr where its choice stands.
// OpenBLAS picks by the CPU's model number, and runs a model it does not know on its oldest
// x86-64 kernels: Debian 12's 0.3.21 took a 2-core Intel Xeon of model 207 for a "Prescott" (SSE3),
// where pp512 of Qwen3-1.7B in F16 ran 4-5x slower than on "SkylakeX" (docs/benchmarks.md,
// "OpenBLAS's kernels by the CPU's features").
const char* better_blas_kernels();

// Runs this program again (execv of /proc/self/exe, same arguments) with OPENBLAS_CORETYPE set to
// better_blas_kernels(): OpenBLAS reads that variable only as it loads, before main. Returns, doing
// nothing, where better_blas_kernels() is nullptr or OPENBLAS_CORETYPE is already set (by the user,
// or by the run that started this one), or where the exec fails.
void rerun_with_better_blas_kernels(char** argv);

}  // namespace bonsai::cpu
