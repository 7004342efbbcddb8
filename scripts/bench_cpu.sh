#!/usr/bin/env bash
# CPU speed benchmark (not a test): synthetic Qwen3-1.7B in several weight types, measured with
# `bonsai bench` (pp512, tg128, bandwidth roofline) and, when LLAMA_BENCH points at llama.cpp's
# llama-bench, with llama.cpp on the same files in the same run (types llama.cpp knows).
# Usage: scripts/bench_cpu.sh [OUT_DIR]   (env: SIZE=1.7b TYPES="ptq1_0 ..." REPS=3 THREADS=2)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/bonsai-bench}
size=${SIZE:-1.7b}
types=${TYPES:-"ptq1_0 pq2_0 tq2_0 q8_0 f16"}
reps=${REPS:-3}
threads=${THREADS:-$(nproc)}
shared=${BONSAI_SHARED_DIR:-../shared}
bonsai=build/cli/bonsai
mkdir -p "$out"
echo "# commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, threads $threads" | tee "$out/bench.txt"
for t in $types; do
  f="$out/qwen3-$size-$t.gguf"
  [ -f "$f" ] || $bonsai synth --size "$size" --type "$t" --tokenizer "$shared/tokenizers/qwen3/tokenizer.json" -o "$f" -t "$threads"
  echo "## bonsai $t" | tee -a "$out/bench.txt"
  $bonsai bench -m "$f" -p 512 -n 128 -r "$reps" -t "$threads" --json | tee -a "$out/bench.txt"
  if [ -n "${LLAMA_BENCH:-}" ]; then
    echo "## llama.cpp $t" | tee -a "$out/bench.txt"
    "$LLAMA_BENCH" -m "$f" -p 512 -n 128 -r "$reps" -t "$threads" -o json 2>/dev/null | tr -d '\n' | tee -a "$out/bench.txt" || echo "(llama.cpp cannot load $t)" | tee -a "$out/bench.txt"
    echo | tee -a "$out/bench.txt"
  fi
done
