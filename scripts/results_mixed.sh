#!/usr/bin/env bash
# Budgeted mixed precision on zh-tiny-qwen3 (docs/results.md, "Mixed precision by sensitivity"):
# sensitivity on calibration chunks -> plans at three budgets -> one sweep with the shipped presets,
# every plan quantized from the same statistics file. Each step is cached or resumable: rerunning
# the script redoes nothing that finished.
# Usage: scripts/results_mixed.sh   env: BONSAI=build/cli/bonsai OUT=build/results-mixed SHARED=../shared
#        STATS=$OUT/zh-tiny.stats.gguf (measured by the sweep's first plan when absent) NICE=10 THREADS=0
#        BUDGETS="1.9 2.2 2.6"
set -euo pipefail
cd "$(dirname "$0")/.."
BONSAI=${BONSAI:-build/cli/bonsai}
OUT=${OUT:-build/results-mixed}
SHARED=${SHARED:-../shared}
STATS=${STATS:-$OUT/zh-tiny.stats.gguf}
NICE=${NICE:-10}
THREADS=${THREADS:-0}
BUDGETS=${BUDGETS:-1.9 2.2 2.6}
MODEL=$SHARED/models/zh-tiny-qwen3
EVAL=$SHARED/corpora/zh/eval-debian-handbook-zh-CN.txt
mkdir -p "$OUT"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty), $(date -u +%H:%M) UTC, $(uptime)" >> "$OUT/machine.txt"
run() { echo "+ $*" >&2; nice -n "$NICE" "$@"; }

if [ ! -f "$STATS" ]; then
  # One calibration for everything after it (gptq needs the Gram matrices).
  run "$BONSAI" quantize -m "$MODEL" -o "$OUT/stats-run.gguf" --stats "$STATS" --threads "$THREADS" 2>&1 | tee "$OUT/stats-run.log"
fi
run "$BONSAI" sensitivity -m "$MODEL" --stats "$STATS" --types ptq1_0,pq2_0,q4_0,q8_0 --chunks 4 --ctx 128 \
  -o "$OUT/zh-tiny.sensitivity.json" --threads "$THREADS" > "$OUT/sensitivity.txt" 2> "$OUT/sensitivity.log"
plans=()
for b in $BUDGETS; do
  run "$BONSAI" plan --budget "${b}bpw" -m "$MODEL" --sensitivity "$OUT/zh-tiny.sensitivity.json" \
    -o "$OUT/budget-$b.yaml" --svg "$OUT/budget-$b.svg" > "$OUT/budget-$b.txt"
  tail -4 "$OUT/budget-$b.txt"
  plans+=("$OUT/budget-$b.yaml")
done
# The default preset with its ternary tensors in PQ2_0 (what `quantize --type pq2_0` does to it).
printf 'name: pq2-keep-embed-head-q8\ndescription: ternary-keep-embed-head-q8 with PQ2_0 blocks\ndefault: PQ2_0\nrules:\n  - match: %s\n    type: Q8_0\n' \
  "'^(token_embd|output)\\.weight\$'" > "$OUT/pq2-keep-embed-head-q8.yaml"
run "$BONSAI" sweep -m "$MODEL" --plans "${plans[@]}" ternary-keep-embed-head-q8 "$OUT/pq2-keep-embed-head-q8.yaml" \
  ternary-all --eval "$EVAL" --ctx 512 --chunks 20 --stats "$STATS" -o "$OUT/sweep" --threads "$THREADS" \
  2>&1 | tee -a "$OUT/sweep.log"
