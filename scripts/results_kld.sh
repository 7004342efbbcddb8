#!/usr/bin/env bash
# KL divergence against BF16 on zh-tiny-qwen3 (docs/results.md, "KL divergence against BF16"):
# the base saved in both layouts (every token in 16 bits; top 128), then BF16 itself, Q8_0, the
# stage-1 default (PTQ1_0) and stage 2 (PQ2_0) compared with each, first 20 chunks at ctx 512.
# Writes OUT/cmp.MODEL.BASE.json (the perplexity command's JSON) and prints one line per pair.
# Usage: scripts/results_kld.sh   env: BONSAI=build/cli/bonsai OUT=build/results-kld SHARED=../shared THREADS=0
set -euo pipefail
cd "$(dirname "$0")/.."
BONSAI=${BONSAI:-build/cli/bonsai}
OUT=${OUT:-build/results-kld}
SHARED=${SHARED:-../shared}
THREADS=${THREADS:-0}
M=$SHARED/models/zh-tiny-qwen3
T=$SHARED/corpora/zh/eval-debian-handbook-zh-CN.txt
mkdir -p "$OUT"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty), $(date -u +%H:%M) UTC, $(uptime)" >> "$OUT/machine.txt"
[ -f "$OUT/zh-q8_0.gguf" ] || "$BONSAI" convert -m "$M" -o "$OUT/zh-q8_0.gguf" --type q8_0
[ -f "$OUT/zh-ptq1.gguf" ] || "$BONSAI" quantize -m "$M" -o "$OUT/zh-ptq1.gguf" --calib "$SHARED"/corpora/zh/calib-*.txt \
  --stats "$OUT/stats.gguf" --threads "$THREADS" > "$OUT/ptq1.log" 2>&1
[ -f "$OUT/zh-pq2.gguf" ] || "$BONSAI" quantize -m "$M" -o "$OUT/zh-pq2.gguf" --type pq2_0 \
  --calib "$SHARED"/corpora/zh/calib-*.txt --stats "$OUT/stats.gguf" --threads "$THREADS" > "$OUT/pq2.log" 2>&1
[ -f "$OUT/bf16.kld" ] || "$BONSAI" perplexity -m "$M" -f "$T" --chunks 20 --save-logits "$OUT/bf16.kld" -t "$THREADS" --json > "$OUT/bf16.json"
[ -f "$OUT/bf16-top128.kld" ] || "$BONSAI" perplexity -m "$M" -f "$T" --chunks 20 --save-logits "$OUT/bf16-top128.kld" \
  --kl-top-k 128 -t "$THREADS" --json > "$OUT/bf16-top128.json"
for m in bf16 q8_0 ptq1 pq2; do
  f=$OUT/zh-$m.gguf; [ "$m" = bf16 ] && f=$M
  for b in bf16 bf16-top128; do
    "$BONSAI" perplexity -m "$f" -f "$T" --kl-base "$OUT/$b.kld" -t "$THREADS" --json > "$OUT/cmp.$m.$b.json"
    echo "$m against $b: $(cat "$OUT/cmp.$m.$b.json")"
  done
done
