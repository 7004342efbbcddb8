#!/usr/bin/env bash
# Stage 2's residual codebooks against spending the same bits on a budgeted plan (docs/results.md,
# "Residual codebooks against budgeted plans"), on zh-tiny-qwen3: one statistics file for every
# row; the grid-only PQ2_0 row; the residual rows (fitted with the base in the output metric,
# quantize/residual_joint.h); for each residual row, `bonsai plan --budget` at its measured
# bits/weight over PQ2_0 / Q4_0 / Q8_0 from one sensitivity table; then every file in two eval
# jobs over the whole held-out file at ctx 512 — KLD against BF16, and the paired difference
# against the grid-only row. Every step is cached: rerunning redoes nothing that finished.
# Usage: scripts/results_residual.sh [ROW...]   (default: every row below)
#   env: BONSAI=build/cli/bonsai OUT=build/results-residual SHARED=../shared NICE=10 THREADS=0
#        CHUNKS=-1 (whole file; fewer for a quick look)
set -euo pipefail
cd "$(dirname "$0")/.."
BONSAI=${BONSAI:-build/cli/bonsai}
OUT=${OUT:-build/results-residual}
SHARED=${SHARED:-../shared}
NICE=${NICE:-10}
THREADS=${THREADS:-0}
CHUNKS=${CHUNKS:--1}
MODEL=$SHARED/models/zh-tiny-qwen3
EVAL=$SHARED/corpora/zh/eval-debian-handbook-zh-CN.txt
STATS=$OUT/zh-tiny.stats.gguf
mkdir -p "$OUT"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty), $(date -u +%H:%M) UTC, $(uptime)" >> "$OUT/machine.txt"
run() { echo "+ $*" >&2; nice -n "$NICE" "$@"; }

# name -> --rc-dim --rc-size (kmeans, one codebook per tensor).
declare -A RC=([v16-k4]="16 4" [v8-k4]="8 4" [v16-k16]="16 16" [v8-k8]="8 8" [v4-k4]="4 4" [v8-k16]="8 16"
               [v8-k32]="8 32")
ORDER=(v16-k4 v16-k16 v8-k8 v8-k16)  # the rows of docs/results.md; the others on request
[ $# -gt 0 ] && ORDER=("$@")
common=(-m "$MODEL" --plan ternary-keep-embed-head-q8 --method gptq --type pq2_0 --stats "$STATS" --threads "$THREADS")
bpw_of() { sed -n 's/^ternary tensors: \([0-9.]*\) bits\/weight.*/\1/p' "$1"; }

# The grid-only row calibrates and saves the statistics every later row reuses.
[ -f "$OUT/grid.gguf" ] || run "$BONSAI" quantize "${common[@]}" -o "$OUT/grid.gguf" > "$OUT/grid.quantize.log" 2>&1
files=("$OUT/grid.gguf")
for name in "${ORDER[@]}"; do
  read -r dim size <<< "${RC[$name]:?unknown row $name}"
  f=$OUT/rc-$name.gguf
  [ -f "$f" ] || run "$BONSAI" quantize "${common[@]}" -o "$f" --residual kmeans --rc-dim "$dim" --rc-size "$size" \
    --rc-rows 0 > "$OUT/rc-$name.quantize.log" 2>&1
  files+=("$f")
done

# The same bits spent by the plan machinery: one sensitivity table, a plan per residual row's size.
SENS=$OUT/zh-tiny.sensitivity.json
[ -f "$SENS" ] || run "$BONSAI" sensitivity -m "$MODEL" --stats "$STATS" --types pq2_0,q4_0,q8_0 --chunks 4 --ctx 128 \
  -o "$SENS" --threads "$THREADS" > "$OUT/sensitivity.txt" 2> "$OUT/sensitivity.log"
for name in "${ORDER[@]}"; do
  f=$OUT/plan-$name.gguf
  if [ ! -f "$f" ]; then
    bpw=$(bpw_of "$OUT/rc-$name.quantize.log")
    run "$BONSAI" plan --budget "${bpw}bpw" -m "$MODEL" --sensitivity "$SENS" --types pq2_0,q4_0,q8_0 \
      -o "$OUT/plan-$name.yaml" > "$OUT/plan-$name.txt"
    run "$BONSAI" quantize -m "$MODEL" --plan "$OUT/plan-$name.yaml" --method gptq --stats "$STATS" \
      --threads "$THREADS" -o "$f" > "$OUT/plan-$name.quantize.log" 2>&1
  fi
  files+=("$f")
done

# KLD against BF16 (every token), and the paired difference against the grid-only row.
run "$BONSAI" eval --kl-base-model "$MODEL" --models "${files[@]}" --texts "$EVAL" --chunks "$CHUNKS" --kl-chunks -1 \
  --threads "$THREADS" -o "$OUT/eval-bf16" > "$OUT/eval-bf16.txt" 2>&1
run "$BONSAI" eval --kl-base-model "$OUT/grid.gguf" --models "${files[@]:1}" --texts "$EVAL" --chunks "$CHUNKS" \
  --kl-chunks 1 --kl-top-k 1 --threads "$THREADS" -o "$OUT/eval-grid" > "$OUT/eval-grid.txt" 2>&1

# One table: name, bits/weight over the block weights, perplexity ± err, KLD ± err (BF16 base),
# ln(PPL/PPL(grid)) ± paired err.
{
  printf 'row\tbpw\tppl\tppl_err\tkld\tkld_err\tdelta_ln_ppl_vs_grid\tpaired_err\n'
  for f in "${files[@]}"; do
    name=$(basename "$f" .gguf)
    if [[ $name == plan-* ]]; then
      bpw=$(sed -n 's/^block linear weights: [0-9]* of [0-9]* budget bytes, \([0-9.]*\) bits.*/\1/p' "$OUT/$name.txt")
    else
      bpw=$(bpw_of "$OUT/$name.quantize.log")
    fi
    b=$(grep "^$name," "$OUT/eval-bf16/eval.csv" | head -1)
    g=$(grep "^$name," "$OUT/eval-grid/eval.csv" | head -1 || true)
    ppl=$(cut -d, -f3,4 <<< "$b" | tr , '\t')
    kld=$(cut -d, -f8,9 <<< "$b" | tr , '\t')
    if [ -n "$g" ]; then dl=$(cut -d, -f14,15 <<< "$g" | tr , '\t'); else dl=$'0\t0'; fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$bpw" "$ppl" "$kld" "$dl"
  done
} > "$OUT/results.tsv"
column -t "$OUT/results.tsv"
