#!/usr/bin/env bash
# Evaluation speed against ik_llama.cpp (not a test; docs/benchmarks.md, "Evaluation speed"):
# 1. whole-file perplexity of zh-tiny-qwen3 at ctx 512: bonsai perplexity and llama-perplexity on
#    the same GGUF (F32, Q8_0), run in turn A B A B ..., and bonsai's stage-1 PTQ1_0 file against
#    ik's IQ1_BN and IQ2_BN of the same model (ik cannot read PTQ1_0), their embedding and head
#    Q8_0 as in bonsai's default plan;
# 2. pp512 of synthetic Qwen3-1.7B: bonsai bench against llama-bench on the same files (F16,
#    Q8_0, Q4_0), PTQ1_0 and PQ2_0 against ik's IQ1_BN and IQ2_BN quantized from the F16 file.
# Usage: IK=/path/to/ik_llama.cpp/build/bin scripts/bench_eval.sh [OUT_DIR]
#   env: BONSAI=build/cli/bonsai THREADS=2 PPL_REPS=1 PP_REPS=2 SHARED=../shared PTQ1=FILE (the stage-1 file;
#        default: quantized here with the default plan) SKIP_PPL=1 / SKIP_PP=1
# Writes OUT_DIR/times.tsv (every run: what, tool, file, seconds or tokens/s). The peer runs in
# OUT_DIR (it writes its llama.log where it runs).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/bonsai-bench-eval}
BONSAI=${BONSAI:-build/cli/bonsai}
IK=${IK:?IK must point at ik_llama.cpp build/bin (llama-perplexity, llama-bench, llama-quantize)}
THREADS=${THREADS:-2}
PPL_REPS=${PPL_REPS:-1}
PP_REPS=${PP_REPS:-2}
SHARED=$(cd "${SHARED:-../shared}" && pwd)  # absolute: the peer runs in OUT_DIR
M=$SHARED/models/zh-tiny-qwen3
T=$SHARED/corpora/zh/eval-debian-handbook-zh-CN.txt
mkdir -p "$out"
out=$(cd "$out" && pwd)
tsv=$out/times.tsv
echo "# commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$tsv"
secs() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1; }

if [ -z "${SKIP_PPL:-}" ]; then
  [ -f "$out/zh-f32.gguf" ] || "$BONSAI" convert -m "$M" -o "$out/zh-f32.gguf" --type f32 >/dev/null
  [ -f "$out/zh-q8_0.gguf" ] || "$BONSAI" convert -m "$M" -o "$out/zh-q8_0.gguf" --type q8_0 >/dev/null
  PTQ1=${PTQ1:-$out/zh-ptq1.gguf}
  [ -f "$PTQ1" ] || "$BONSAI" quantize -m "$M" -o "$PTQ1" --calib "$SHARED"/corpora/zh/calib-*.txt -t "$THREADS" >/dev/null 2>&1
  for q in IQ1_BN IQ2_BN; do
    f=$out/zh-$(echo $q | tr A-Z a-z).gguf
    [ -f "$f" ] || "$IK/llama-quantize" --token-embedding-type q8_0 --output-tensor-type q8_0 "$out/zh-f32.gguf" "$f" $q "$THREADS" >/dev/null 2>&1
  done
  for r in $(seq "$PPL_REPS"); do
    for f in f32 q8_0; do
      echo -e "ppl\tbonsai\t$f\t$(secs "$BONSAI" perplexity -m "$out/zh-$f.gguf" -f "$T" -c 512 -t "$THREADS")" | tee -a "$tsv"
      echo -e "ppl\tik\t$f\t$(secs env -C "$out" "$IK/llama-perplexity" -m "$out/zh-$f.gguf" -f "$T" -c 512 -t "$THREADS")" | tee -a "$tsv"
    done
    echo -e "ppl\tbonsai\tptq1_0\t$(secs "$BONSAI" perplexity -m "$PTQ1" -f "$T" -c 512 -t "$THREADS")" | tee -a "$tsv"
    for q in iq1_bn iq2_bn; do
      echo -e "ppl\tik\t$q\t$(secs env -C "$out" "$IK/llama-perplexity" -m "$out/zh-$q.gguf" -f "$T" -c 512 -t "$THREADS")" | tee -a "$tsv"
    done
  done
fi

if [ -z "${SKIP_PP:-}" ]; then
  tok=$SHARED/tokenizers/qwen3/tokenizer.json
  for t in f16 q8_0 q4_0 ptq1_0 pq2_0; do
    f=$out/qwen3-1.7b-$t.gguf
    [ -f "$f" ] || "$BONSAI" synth --size 1.7b --type $t --tokenizer "$tok" -o "$f" >/dev/null 2>&1
  done
  for q in IQ1_BN IQ2_BN; do
    f=$out/qwen3-1.7b-$(echo $q | tr A-Z a-z).gguf
    [ -f "$f" ] || "$IK/llama-quantize" --token-embedding-type q8_0 --output-tensor-type q8_0 "$out/qwen3-1.7b-f16.gguf" "$f" $q "$THREADS" >/dev/null 2>&1
  done
  bonsai_pp() { "$BONSAI" bench -m "$1" -p 512 -n 1 -r 2 -t "$THREADS" --json | grep -o '"pp_tps":[0-9.e+-]*' | head -1 | cut -d: -f2; }
  ik_pp() { env -C "$out" "$IK/llama-bench" -m "$1" -p 512 -n 0 -r 2 -t "$THREADS" -o csv 2>/dev/null | tail -1 | awk -F, '{gsub(/"/,""); print $(NF-2)}'; }
  for r in $(seq "$PP_REPS"); do
    for t in f16 q8_0 q4_0; do
      echo -e "pp512\tbonsai\t$t\t$(bonsai_pp "$out/qwen3-1.7b-$t.gguf")" | tee -a "$tsv"
      echo -e "pp512\tik\t$t\t$(ik_pp "$out/qwen3-1.7b-$t.gguf")" | tee -a "$tsv"
    done
    for t in ptq1_0 pq2_0; do echo -e "pp512\tbonsai\t$t\t$(bonsai_pp "$out/qwen3-1.7b-$t.gguf")" | tee -a "$tsv"; done
    for t in iq1_bn iq2_bn; do echo -e "pp512\tik\t$t\t$(ik_pp "$out/qwen3-1.7b-$t.gguf")" | tee -a "$tsv"; done
  done
fi
echo "# done $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$tsv"
