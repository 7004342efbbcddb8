#!/usr/bin/env bash
# The GPU check (not a unit test; needs an NVIDIA GPU): the CUDA tests, perplexity on CUDA
# against the CPU for the models present, and `bonsai bench --device cuda` on synthetic
# Qwen3-8B in several weight types; the calibration numerics on CUDA (Gram matrices, GPTQ)
# against the CPU's, and GPTQ's speed on a 4096 x 4096 layer. Results go to $OUT (default
# /tmp/bonsai-cuda):
#   results.jsonl  one JSON object a line (matvec speed per path, GPTQ, perplexity and bench runs,
#                  tagged)
#   cuda_tests.json, cuda_calib_tests.json, log.txt, gpu.txt
# Usage: scripts/cuda_check.sh
# Env: BONSAI_BIN_DIR  folder with prebuilt bonsai, bonsai_cuda_tests and bonsai_cuda_calib_tests
#                      (default: build here, into build-cuda, for this GPU's architecture)
#      BONSAI_LOADER   command prefix that runs those binaries (a carried ld.so, say)
#      BONSAI_SHARED_DIR  fixtures (default ../shared); PPL_MODELS extra "name=path" pairs
#      PPL_DEVICES="cuda cpu" (where to measure perplexity; cuda alone when the CPU figures
#      come from another machine; empty: none), SIZE=8b TYPES="ptq1_0 pq2_0 q4_0 f16" REPS=3,
#      PROFILE_KERNELS=N (Nsight Compute times N kernels of a PROFILE_TYPE decode step; 0: off),
#      QUANTIZE="8b:128 14b:32" (quantize --device cuda on synthetic BF16 Qwen3-SIZE with that
#      many calibration windows of 512, default plan and gptq; empty: none), QUANTIZE_TIMEOUT=1200
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/bonsai-cuda}
mkdir -p "$out"
log="$out/log.txt"
res="$out/results.jsonl"
: >"$res"
shared=${BONSAI_SHARED_DIR:-../shared}
size=${SIZE:-8b}
types=${TYPES:-"ptq1_0 pq2_0 q4_0 f16"}
reps=${REPS:-3}
ppl_devices=${PPL_DEVICES-"cuda cpu"}  # set and empty: no perplexity
loader=${BONSAI_LOADER:-}
say() { echo "== $*" | tee -a "$log"; }

nvidia-smi >"$out/gpu.txt" 2>&1 || { echo "no nvidia-smi: this check needs an NVIDIA GPU" | tee -a "$log"; exit 1; }
say "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"

if [ -n "${BONSAI_BIN_DIR:-}" ]; then
  bin=$BONSAI_BIN_DIR
  tests=$bin/bonsai_cuda_tests
  calib_tests=$bin/bonsai_cuda_calib_tests
else
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
  say "building for sm_$arch"
  cmake -S . -B build-cuda -G Ninja -DBONSAI_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" >>"$log" 2>&1 &&
    cmake --build build-cuda --target bonsai bonsai_cuda_tests bonsai_cuda_calib_tests >>"$log" 2>&1 ||
    { say "build failed"; exit 1; }
  bin=build-cuda/cli
  tests=build-cuda/tests/bonsai_cuda_tests
  calib_tests=build-cuda/tests/bonsai_cuda_calib_tests
fi

say "CUDA tests"
BONSAI_SHARED_DIR=$shared timeout 180 $loader "$tests" --gtest_output=json:"$out/cuda_tests.json" 2>&1 | tee -a "$log" |
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure" | head -40

say "CUDA calibration tests (calibrate/cuda, quantize/cuda against the CPU)"
BONSAI_SHARED_DIR=$shared timeout 600 $loader "$calib_tests" --gtest_output=json:"$out/cuda_calib_tests.json" 2>&1 | tee -a "$log" |
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure" | head -40

# GPTQ on a 4096 x 4096 layer: the device's phases against the CPU's whole run.
say "GPTQ speed"
timeout 300 $loader "$calib_tests" --gtest_also_run_disabled_tests --gtest_filter='GptqCuda.DISABLED_Speed' 2>&1 |
  tee -a "$log" | grep '^{"kind":"gptq_cuda' | tee -a "$res"

# One-token matvec speed of each path on 1 GiB of weights, against the read bandwidth.
say "matvec throughput"
timeout 120 $loader "$tests" --gtest_also_run_disabled_tests --gtest_filter='CudaMatmul.DISABLED_Throughput' 2>&1 |
  tee -a "$log" | grep '^{"kind":"matvec' | tee -a "$res"

# Perplexity: the same file on the CPU and on CUDA (ctx 512, the whole held-out text).
text=$shared/corpora/zh/eval-debian-handbook-zh-CN.txt
models="zh-bf16=$shared/models/zh-tiny-qwen3 ${PPL_MODELS:-}"
for pair in $models; do
  name=${pair%%=*}
  path=${pair#*=}
  [ -e "$path" ] && [ -f "$text" ] || { say "perplexity $name: $path or $text missing, skipped"; continue; }
  for dev in $ppl_devices; do
    say "perplexity $name on $dev"
    start=$(date +%s%N)
    j=$(timeout 300 $loader "$bin/bonsai" perplexity -m "$path" -f "$text" --device "$dev" --json 2>>"$log")
    ms=$((($(date +%s%N) - start) / 1000000))
    echo "{\"kind\":\"perplexity\",\"model\":\"$name\",\"device\":\"$dev\",\"ms\":$ms,\"result\":${j:-null}}" | tee -a "$res"
  done
done

# quantize --device cuda at scale (issue 47): synthetic BF16 models made here (no network, and
# the files are too large to carry), the default plan and method, time and memory from the job's
# JSON summary and /usr/bin/time.
for job in ${QUANTIZE-"8b:128 14b:32"}; do
  qs=${job%%:*}
  qw=${job#*:}
  src=/tmp/bonsai-synth-$qs-bf16.gguf
  say "synth $qs bf16"
  [ -f "$src" ] || timeout 900 $loader "$bin/bonsai" synth --size "$qs" --type bf16 --embd-type bf16 --output-type bf16 \
    --tokenizer "$shared/tokenizers/qwen3/tokenizer.json" -o "$src" >>"$log" 2>&1
  [ -f "$src" ] || { say "synth $qs failed"; continue; }
  say "quantize $qs on cuda, $qw windows"
  start=$(date +%s%N)
  j=$(/usr/bin/time -v -o "$out/quantize-$qs.time" timeout "${QUANTIZE_TIMEOUT:-1200}" $loader "$bin/bonsai" quantize \
    -m "$src" -o /tmp/bonsai-q-$qs.gguf --device cuda --calib "$shared"/corpora/zh/calib-*.txt \
    --calib-windows "$qw" --json 2>>"$log")
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  rss=$(grep -o 'Maximum resident set size (kbytes): [0-9]*' "$out/quantize-$qs.time" 2>/dev/null | grep -o '[0-9]*$')
  echo "{\"kind\":\"quantize_cuda\",\"size\":\"$qs\",\"windows\":$qw,\"rc\":$rc,\"ms\":$ms,\"maxrss_kb\":${rss:-null},\"result\":${j:-null}}" | tee -a "$res"
  rm -f /tmp/bonsai-q-$qs.gguf
done

# Speed on synthetic Qwen3-$size.
for t in $types; do
  f=/tmp/bonsai-synth-$size-$t.gguf
  say "synth $size $t"
  [ -f "$f" ] || timeout 200 $loader "$bin/bonsai" synth --size "$size" --type "$t" -o "$f" 2>&1 | tr '\r' '\n' | tail -2 >>"$log"
  [ -f "$f" ] || { say "synth $t failed"; continue; }
  say "bench $size $t"
  j=$(timeout 200 $loader "$bin/bonsai" bench -m "$f" --device cuda -p 512 -n 128 -r "$reps" --json 2>>"$log")
  echo "{\"kind\":\"bench\",\"size\":\"$size\",\"type\":\"$t\",\"result\":${j:-null}}" | tee -a "$res"
  # Where a decode step's time goes: each kernel of the second decode step, timed alone by Nsight
  # Compute: PROFILE_KERNELS launches after PROFILE_SKIP (an 8-token prompt and one decode step).
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ "$t" = "${PROFILE_TYPE:-ptq1_0}" ] && [ -n "$ncu" ] && [ "${PROFILE_KERNELS:-0}" -gt 0 ]; then
    say "kernel times of one $t decode step ($ncu)"
    timeout 150 "$ncu" --clock-control none --graph-profiling node --launch-skip "${PROFILE_SKIP:-1666}" \
      --launch-count "$PROFILE_KERNELS" --metrics gpu__time_duration.sum --csv \
      $loader "$bin/bonsai" bench -m "$f" --device cuda -p 8 -n 2 -r 1 >"$out/ncu.csv" 2>>"$log" || say "ncu failed"
    # Time per kernel name over the window: ncu-decode-step.txt.
    python3 - "$out/ncu.csv" >"$out/ncu-decode-step.txt" 2>>"$log" <<'EOF' || say "ncu summary failed"
import csv,collections,sys
rows=list(csv.reader(open(sys.argv[1])))
hi=[i for i,r in enumerate(rows) if r and r[0]=='ID'][0]
h=rows[hi]; data=rows[hi+1:]
ki=h.index('Kernel Name'); mi=h.index('Metric Name'); vi=h.index('Metric Value'); gi=h.index('Grid Size')
tot=collections.Counter(); cnt=collections.Counter()
for r in data:
    if r[mi]!='gpu__time_duration.sum': continue
    v=float(r[vi].replace(',',''))/1000
    name=r[ki].split('(')[0].split('<')[0].replace('void ','').split('::')[-1]
    tot[name]+=v; cnt[name]+=1
print('kernels',sum(cnt.values()),'total us',round(sum(tot.values()),1))
for k,v in tot.most_common(): print(f'{k:20s} n={cnt[k]:4d} total={v:8.1f}us mean={v/cnt[k]:6.2f}us share={100*v/sum(tot.values()):5.1f}%')
EOF
  fi
  rm -f "$f"
done
say "done"
