#!/usr/bin/env bash
# CPU speed benchmark (not a test): synthetic Qwen3 models in several weight types, measured with
# `bonsai bench` (pp, tg, bytes per token, bandwidth probed around each tg repetition, roofline %) and,
# when LLAMA_BENCH points at llama.cpp's llama-bench, with llama.cpp on the same files right after
# (a type llama.cpp cannot load gets its error in the table instead of numbers).
#
# Usage: scripts/bench_cpu.sh [OUT_DIR]
#   env: SIZE=1.7b TYPES="ptq1_0 pq2_0 pq2_0+rc tq2_0 q8_0 f16" REPS=3 THREADS=$(nproc) LLAMA_BENCH=path
#        BONSAI=path (the binary; default build/cli/bonsai)
#        TABLE_ONLY=1 (no runs: table.md again from OUT_DIR's JSON)
#   A type T+rc is T with bonsai's residual codebooks (synth --residual kmeans at bonsai quantize's
#   defaults v=8, K=16, G=all rows): a file only bonsai loads (llama.cpp's error goes in the table).
# Writes OUT_DIR/bench.txt (every command, the load average before and after it, its raw output)
# and OUT_DIR/table.md (the side-by-side table; docs/benchmarks.md quotes it). Models are
# synthesized into OUT_DIR once and reused. The machine should be otherwise idle: the load
# average printed next to every run says whether it was. OMP_WAIT_POLICY (recorded in the header)
# reaches llama.cpp's OpenMP threads; bonsai's runtime runs on its own team (runtime/cpu/parallel.h),
# whose waiting threads spin for 200 us and then sleep whatever the variable says.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/bonsai-bench}
size=${SIZE:-1.7b}
types=${TYPES:-"ptq1_0 pq2_0 pq2_0+rc tq2_0 q8_0 f16"}
reps=${REPS:-3}
threads=${THREADS:-$(nproc)}
shared=${BONSAI_SHARED_DIR:-../shared}
bonsai=${BONSAI:-build/cli/bonsai}
np=512
ng=128
mkdir -p "$out"
log="$out/bench.txt"
table="$out/table.md"
load() { cut -d' ' -f1-3 /proc/loadavg; }
# synth's options for a TYPES entry: T or T+rc (T with the residual at its defaults).
synth_args() { case $1 in *+rc) echo "--type ${1%+rc} --residual kmeans" ;; *) echo "--type $1" ;; esac; }
# The table's name for a TYPES entry.
label() { case $1 in *+rc) echo "$(echo "${1%+rc}" | tr a-z A-Z) + residual kmeans (v=8, K=16, G=all)" ;; *) echo "$1" | tr a-z A-Z ;; esac; }
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . 2>/dev/null || commit="$commit (plus uncommitted changes)"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
flags=$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_vbmi2|fma|f16c' | sort -u | xargs)
header="commit $commit, $(date -u +%FT%TZ), $cpu ($flags), $(nproc) cores, $threads threads, reps $reps, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
[ -n "${TABLE_ONLY:-}" ] && header=$(head -1 "$log" | sed 's/^# //') || echo "# $header" | tee "$log"

# run NAME CMD...: logs the command and the load average around it; stdout goes to $out/NAME.
run() {
  local name=$1
  shift
  echo "## $name: load before $(load)" >>"$log"
  echo "\$ $*" >>"$log"
  local rc=0
  "$@" >"$out/$name" 2>"$out/$name.err" || rc=$?
  cat "$out/$name" >>"$log"
  echo "## $name: exit $rc, load after $(load)" | tee -a "$log"
  return 0
}

for t in $types; do
  [ -n "${TABLE_ONLY:-}" ] && break  # only rewrite table.md from the JSON already in OUT_DIR
  f="$out/qwen3-$size-$t.gguf"
  # shellcheck disable=SC2046  # synth_args is several words on purpose
  [ -f "$f" ] || $bonsai synth --size "$size" $(synth_args "$t") --tokenizer "$shared/tokenizers/qwen3/tokenizer.json" -o "$f" \
    -t "$threads" 2>>"$out/synth.log"
  run "bonsai-$t.json" $bonsai bench -m "$f" -p $np -n $ng -r "$reps" -t "$threads" --json
  if [ -n "${LLAMA_BENCH:-}" ]; then
    run "llama-$t.json" "$LLAMA_BENCH" -m "$f" -p $np -n $ng -r "$reps" -t "$threads" -o json
    # llama-bench hides the loader's reason unless verbose: ask again for it when it failed.
    jq -e 'length > 0' "$out/llama-$t.json" >/dev/null 2>&1 ||
      "$LLAMA_BENCH" -m "$f" -p 1 -n 1 -r 1 -v 2>&1 | grep -m1 -E 'invalid ggml type|error loading model' \
        >"$out/llama-$t.why" || true
  fi
done

# ---- the table ----
fmt() { jq -r "$1" "$2" 2>/dev/null || true; }
{
  echo "$header"
  echo
  echo "| type | pp$np t/s | tg$ng t/s | MB/token | bandwidth GB/s | tg % of roofline | llama.cpp pp$np t/s | llama.cpp tg$ng t/s | pp ratio | tg ratio | load avg before bonsai / llama.cpp |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for t in $types; do
    b="$out/bonsai-$t.json"
    l="$out/llama-$t.json"
    if ! { [ -s "$b" ] && jq -e .tg_tps "$b" >/dev/null 2>&1; }; then
      echo "| $(label "$t") | not measured (run interrupted or failed) | | | | | | | | | |"
      continue
    fi
    pp=$(fmt '"\(.pp_tps*100|round/100) ± \(.pp_sd*100|round/100)"' "$b")
    tg=$(fmt '"\(.tg_tps*100|round/100) ± \(.tg_sd*100|round/100)"' "$b")
    mb=$(fmt '.bytes_per_token/1e6*10|round/10' "$b")
    # probes around every tg repetition (bench since 2026-12-02): their mean (min-max), and the
    # repetitions' roofline % (each against its own probes) as mean ± sd
    bw=$(fmt 'if has("bandwidth_min_gbs") then "\(.bandwidth_gbs*100|round/100) (\(.bandwidth_min_gbs*10|round/10)–\(.bandwidth_max_gbs*10|round/10))" else .bandwidth_gbs*100|round/100 end' "$b")
    pct=$(fmt 'if has("roofline_sd") then "\(.roofline_pct*10|round/10) ± \(.roofline_sd*10|round/10)" else .roofline_pct*10|round/10 end' "$b")
    lb=$(grep -m1 "^## bonsai-$t.json: load before" "$log" | sed 's/.*load before //' | cut -d' ' -f1 || true)
    if [ -n "${LLAMA_BENCH:-}" ] && [ -s "$l" ] && jq -e 'length > 0' "$l" >/dev/null 2>&1; then
      lpp=$(jq -r ".[] | select(.n_prompt == $np and .n_gen == 0) | \"\(.avg_ts*100|round/100) ± \(.stddev_ts*100|round/100)\"" "$l")
      ltg=$(jq -r ".[] | select(.n_gen == $ng and .n_prompt == 0) | \"\(.avg_ts*100|round/100) ± \(.stddev_ts*100|round/100)\"" "$l")
      rpp=$(jq -r --slurpfile b "$b" ".[] | select(.n_prompt == $np and .n_gen == 0) | \$b[0].pp_tps / .avg_ts * 100 | round / 100" "$l")
      rtg=$(jq -r --slurpfile b "$b" ".[] | select(.n_gen == $ng and .n_prompt == 0) | \$b[0].tg_tps / .avg_ts * 100 | round / 100" "$l")
      ll=$(grep -m1 "^## llama-$t.json: load before" "$log" | sed 's/.*load before //' | cut -d' ' -f1 || true)
    elif [ -n "${LLAMA_BENCH:-}" ] && ! grep -q "^## llama-$t.json: exit" "$log"; then
      lpp="not measured (run interrupted or still running)"; ltg="—"; rpp="—"; rtg="—"; ll="—"
    elif [ -n "${LLAMA_BENCH:-}" ]; then
      why=$(sed -e 's/^[a-z_]*: //' "$out/llama-$t.why" 2>/dev/null | cut -c1-90 | tr '|' '/' || true)
      lpp="cannot load (${why:-no output})"
      ltg="—"
      rpp="—"
      rtg="—"
      ll=$(grep -m1 "^## llama-$t.json: load before" "$log" | sed 's/.*load before //' | cut -d' ' -f1 || true)
    else
      lpp="not run"; ltg="—"; rpp="—"; rtg="—"; ll="—"
    fi
    echo "| $(label "$t") | $pp | $tg | $mb | $bw | $pct | $lpp | $ltg | $rpp | $rtg | $lb / $ll |"
  done
  echo
  echo "Commands (per type T, file F = $out/qwen3-$size-T.gguf):"
  echo
  echo "    $bonsai synth --size $size --type T --tokenizer $shared/tokenizers/qwen3/tokenizer.json -o F -t $threads"
  case " $types " in *+rc\ *) echo "    (T+rc: synth --type T --residual kmeans, the defaults v=8, K=16, G=all rows)" ;; esac
  echo "    $bonsai bench -m F -p $np -n $ng -r $reps -t $threads --json"
  [ -n "${LLAMA_BENCH:-}" ] && echo "    $LLAMA_BENCH -m F -p $np -n $ng -r $reps -t $threads -o json"
  [ -n "${LLAMA_BENCH:-}" ] && [ -s "$out/llama-q8_0.json" ] &&
    echo && echo "llama.cpp build: $(jq -r '.[0] | "\(.build_commit) (build \(.build_number)), backend \(.backends)"' "$out/llama-q8_0.json" 2>/dev/null)"
  true
} >"$table"
cat "$table"
