// Plain float loops compiled for several instruction sets in one definition: BONSAI_CPU_CLONES
// makes GCC emit a function for AVX-512 (x86-64-v4), for AVX2+FMA (x86-64-v3) and for the
// baseline, and the loader picks the widest this CPU runs (an ifunc). Under it, an `omp simd` loop
// that calls expf calls glibc's libmvec (_ZGVeN16v_expf, _ZGVdN8v_expf, _ZGVbN4v_expf: within 4
// ulp), since expf is declared `omp declare simd` here (glibc's math.h does that only under
// -ffast-math). Clang would leave such a loop scalar and warn, so it gets one plain function
// (it only builds the fuzz targets).
#pragma once
#include <cmath>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#define BONSAI_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define BONSAI_EXPF_LOOP _Pragma("omp simd")
#else
#define BONSAI_CPU_CLONES
#define BONSAI_EXPF_LOOP
#endif
