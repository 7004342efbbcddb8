#!/usr/bin/env bash
# Submits `bonsai sweep SWEEP-OPTIONS` to Slurm as three jobs (docs/scale.md, "Sweeps on a Slurm cluster"), each running
# scripts/sweep_slurm.sbatch: prepare (the shared files), a job array with one task per row once
# prepare succeeded, and the merge once every task succeeded. A failed job cancels those after it
# (--kill-on-invalid-dep) instead of leaving them pending forever.
# Usage: scripts/sweep_slurm.sh SWEEP-OPTIONS...     prints the three job ids: prepare, array, merge
# env: BONSAI=bonsai (the binary, on the submitting host and the nodes)
#      LOGS=.          folder of the jobs' output files (sweep-prepare-JOB.out, sweep-task-JOB_I.out, ...)
#      ARRAY_LIMIT=    at most this many tasks at once (--array=0-N-1%ARRAY_LIMIT)
#      SWEEP_SBATCH=   more sbatch options for all three jobs, e.g. "--cpus-per-task=16 --mem=16G"
#      SBATCH_*        sbatch's own (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT, ...): all three jobs
set -euo pipefail
job=$(cd "$(dirname "$0")" && pwd)/sweep_slurm.sbatch
export BONSAI=${BONSAI:-bonsai}
LOGS=${LOGS:-.}
mkdir -p "$LOGS"
# The array's size: one task per row after the BF16 base (bonsai reads the plans, not the model).
n=$("$BONSAI" sweep "$@" --list-tasks | wc -l)
[ "$n" -gt 0 ] || { echo "sweep_slurm.sh: the sweep has no rows to run" >&2; exit 2; }
# The three jobs (docs/scale.md, "Sweeps on a Slurm cluster", shows these lines).
# shellcheck disable=SC2086  # SWEEP_SBATCH: options, split at spaces on purpose
sb() { sbatch --parsable --kill-on-invalid-dep=yes ${SWEEP_SBATCH:-} "$@" | cut -d';' -f1; }
prepare=$(sb --job-name=sweep-prepare --output="$LOGS/sweep-prepare-%j.out" "$job" prepare "$@")
array=$(sb --job-name=sweep-task --dependency="afterok:$prepare" --array="0-$((n - 1))${ARRAY_LIMIT:+%$ARRAY_LIMIT}" \
  --output="$LOGS/sweep-task-%A_%a.out" "$job" task "$@")
merge=$(sb --job-name=sweep-merge --dependency="afterok:$array" --output="$LOGS/sweep-merge-%j.out" "$job" merge "$@")
echo "$prepare"
echo "$array"
echo "$merge"
