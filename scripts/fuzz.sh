#!/usr/bin/env bash
# Fuzzes every reader of untrusted input: builds the libFuzzer targets of tests/fuzz (clang,
# BONSAI_FUZZ=ON) in build-fuzz, then runs each for SECONDS (default 600), one at a time, from
# its committed seeds. Prints one summary line per target (executions, seconds, edges covered,
# new crash files) and exits 1 when any target found a crash.
#   scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]      e.g. scripts/fuzz.sh 60 gguf plan
# New inputs go to build-fuzz/fuzz-corpus/<target> (not committed), crash reproducers to
# build-fuzz/fuzz-crashes/<target>/; logs to build-fuzz/fuzz-logs/<target>.log. A fixed crash's
# reproducer belongs in tests/fuzz/corpus/<target>/, which ctest replays in every build.
# Bounds per input: 10 s (a hang), 64 MB for one allocation (inputs are at most tens of KB, so a
# larger allocation means a length or count was trusted), 2 GB resident.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
cc=${CC:-clang}
cxx=${CXX:-clang++}
command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (libFuzzer needs clang; set CXX)" >&2; exit 2; }


if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in tests/fuzz/*_fuzz.cpp; do
    b=$(basename "$f" _fuzz.cpp)
    targets+=("$b")
  done
fi
# FUZZ_SKIP_BUILD=1: run the targets as built (another run may be building in build-fuzz).
if [ -z "${FUZZ_SKIP_BUILD:-}" ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CC=$cc CXX=$cxx cmake -S . -B build-fuzz -G Ninja -DBONSAI_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" "${launcher[@]}" >/dev/null
  build=()
  for t in "${targets[@]}"; do build+=("bonsai_fuzz_$t"); done
  CCACHE_BASEDIR=$PWD ninja -C build-fuzz -j "${JOBS:-$(nproc)}" "${build[@]}"
fi

found=0
summary=build-fuzz/fuzz-summary.txt

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo '+changes'), $(nproc) cores," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load before: $(cut -d' ' -f1-3 /proc/loadavg)" \
  | tee -a "$summary"
for t in "${targets[@]}"; do
  work=build-fuzz/fuzz-corpus/$t
  crashes=build-fuzz/fuzz-crashes/$t
  log=build-fuzz/fuzz-logs/$t.log
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  before=$(find "$crashes" -type f | wc -l)
  start=$(date +%s)
  rc=0
  "build-fuzz/tests/fuzz/bonsai_fuzz_$t" "$work" "tests/fuzz/corpus/$t" -max_total_time="$secs" \
    -print_final_stats=1 -timeout=10 -malloc_limit_mb=64 -rss_limit_mb=2048 \
    -artifact_prefix="$crashes/" >"$log" 2>&1 || rc=$?
  took=$(($(date +%s) - start))
  after=$(find "$crashes" -type f | wc -l)
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  rate=$(grep -m1 'stat::average_exec_per_sec' "$log" | awk '{print $2}')
  # The last status line carries the final coverage: "#N ... cov: EDGES ft: FEATURES corp: ..."
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  new=$((after - before))
  [ "$rc" -ne 0 ] && [ "$new" -eq 0 ] && new="rc=$rc"
  line=$(printf '%-18s execs=%s (%s/s) seconds=%s edges=%s features=%s new_crashes=%s' \
    "$t" "${execs:-?}" "${rate:-?}" "$took" "${cov:-?}" "${ft:-?}" "$new")
  echo "$line" | tee -a "$summary"
  if [ "$rc" -ne 0 ]; then
    found=1
    grep -m3 -E 'ERROR: |runtime error|fuzz finding|deadly signal|Test unit written' "$log" | sed 's/^/    /' || true
  fi
done
exit $found
