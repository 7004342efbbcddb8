#!/usr/bin/env bash
# Builds and runs every test twice: a warning-as-error Release build (with the CUDA sources
# compiled when nvcc is present) and an AddressSanitizer + UndefinedBehaviorSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# CUDA sources (when nvcc is present) are compiled for one architecture here: every source is
# compiled and warning-checked; the default build's three architectures would triple nvcc's time.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBONSAI_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build -j "$jobs" --output-on-failure
# No -Werror here: GCC 12 reports false -Wmaybe-uninitialized inside <regex> under -fsanitize.
# -O1 -g1 (line tables: enough for ASan's stack traces) instead of RelWithDebInfo's -O2 -g: GCC
# compiles the instrumented code about twice as fast (pipeline.cpp: 53 s instead of 121 s of CPU),
# and this build was the larger half of CI's time. Assertions stay on here (no -DNDEBUG).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g1" -DBONSAI_SANITIZE=ON \
  -DBONSAI_CUDA=OFF -DBONSAI_WERROR=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan -j "$jobs" --output-on-failure -LE slow
