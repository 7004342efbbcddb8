#!/usr/bin/env bash
# Stage-2 results on zh-tiny-qwen3 (docs/results.md, "Stage 2"): plan ternary-keep-embed-head-q8,
# one statistics file for every row (measured once; each quantize then skips the forward),
# held-out perplexity of the whole eval file at ctx 512. Writes, per row, NAME.quantize.log,
# NAME.ppl.json and one line of results.tsv (name, bits/weight over the ternary tensors, file
# bytes, quantize seconds, perplexity, the quantize arguments). Rows already in results.tsv are
# skipped, so an interrupted run continues.
# Usage: scripts/results_stage2.sh [ROW...]   (default: every row below, in order)
#   env: BONSAI=build/cli/bonsai OUT=build/results-stage2 SHARED=../shared STATS=$OUT/zh-tiny.stats.gguf
#        NICE=10 (the machine is shared) THREADS=0
set -euo pipefail
cd "$(dirname "$0")/.."
BONSAI=${BONSAI:-build/cli/bonsai}
OUT=${OUT:-build/results-stage2}
SHARED=${SHARED:-../shared}
STATS=${STATS:-$OUT/zh-tiny.stats.gguf}
NICE=${NICE:-10}
THREADS=${THREADS:-0}
MODEL=$SHARED/models/zh-tiny-qwen3
EVAL=$SHARED/corpora/zh/eval-debian-handbook-zh-CN.txt
mkdir -p "$OUT"

# name -> quantize arguments after the common ones (plan, stats, method gptq).
declare -A ARGS=(
  [stage1]="--type ptq1_0"
  [grid]="--type pq2_0"
  [pattern]="--type pq2_0 --residual pattern"
  [km-v8-k16-all]="--type pq2_0 --residual kmeans --rc-dim 8 --rc-size 16 --rc-rows 0"
  [km-v4-k16-all]="--type pq2_0 --residual kmeans --rc-dim 4 --rc-size 16 --rc-rows 0"
  [km-v16-k256-all]="--type pq2_0 --residual kmeans --rc-dim 16 --rc-size 256 --rc-rows 0"
  [km-v8-k16-g64]="--type pq2_0 --residual kmeans --rc-dim 8 --rc-size 16 --rc-rows 64"
  [km-v8-k256-all]="--type pq2_0 --residual kmeans --rc-dim 8 --rc-size 256 --rc-rows 0"
  # The residual on a per-group base (optimal), where its diagonal k-means is in the base's metric.
  [opt-grid]="--type pq2_0 --method optimal"
  [opt-km-v8-k16-all]="--type pq2_0 --method optimal --residual kmeans --rc-dim 8 --rc-size 16 --rc-rows 0"
  [opt-pattern]="--type pq2_0 --method optimal --residual pattern"
  # The grid on the Hadamard-rotated weights: needs statistics in the rotated basis, so run it with
  # its own STATS file (calibrated and saved by its first run).
  [grid-hadamard]="--type pq2_0 --rotate hadamard --rotate-block 128"
)
ORDER=(stage1 grid pattern km-v8-k16-all km-v4-k16-all km-v16-k256-all km-v8-k16-g64 km-v8-k256-all opt-grid opt-km-v8-k16-all
       opt-pattern)
[ $# -gt 0 ] && ORDER=("$@")

TSV=$OUT/results.tsv
[ -f "$TSV" ] || printf 'name\tbpw_ternary\tfile_bytes\tquantize_s\tppl\tppl_err\targs\n' > "$TSV"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty), $(uptime)" >> "$OUT/machine.txt"

for name in "${ORDER[@]}"; do
  extra=${ARGS[$name]:?unknown row $name}
  if cut -f1 "$TSV" | grep -qx "$name"; then echo "$name: done already"; continue; fi
  file=$OUT/$name.gguf
  method="--method gptq"
  [[ $extra == *--method* ]] && method=""
  common="-m $MODEL -o $file --plan ternary-keep-embed-head-q8 $method --stats $STATS --threads $THREADS"
  echo "== $name: bonsai quantize $common $extra"
  t0=$(date +%s.%N)
  nice -n "$NICE" "$BONSAI" quantize $common $extra > "$OUT/$name.quantize.log" 2>&1
  t1=$(date +%s.%N)
  qs=$(echo "$t1 - $t0" | bc)
  bpw=$(sed -n 's/^ternary tensors: \([0-9.]*\) bits\/weight.*/\1/p' "$OUT/$name.quantize.log")
  bytes=$(stat -c %s "$file")
  nice -n "$NICE" "$BONSAI" perplexity -m "$file" -f "$EVAL" --ctx 512 --threads "$THREADS" --json > "$OUT/$name.ppl.json"
  ppl=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.3f\t%.3f" % (d["ppl"], d["ppl_err"]))' "$OUT/$name.ppl.json")
  printf '%s\t%s\t%s\t%.1f\t%s\t%s\n' "$name" "$bpw" "$bytes" "$qs" "$ppl" "$extra" >> "$TSV"
  tail -1 "$TSV"
done
