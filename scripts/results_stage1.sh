#!/usr/bin/env bash
# The stage-1 table of docs/results.md: zh-tiny-qwen3, plan ternary-keep-embed-head-q8, default
# calibration (128 x 512 tokens of ../shared/corpora/zh/calib-*.txt, seed 0), each method with
# and without Hadamard rotation; held-out perplexity on the whole eval file at ctx 512.
#
#   scripts/results_stage1.sh [RUN...]
#
# RUN: bf16 (the model as stored), q8_0 (`bonsai convert --type q8_0`, no calibration), or
# METHOD-ROTATION (rtn-none, gptq-hadamard, ...), or METHOD-ROTATION-en: the same calibrated on
# the English TinyStories sample (../shared/corpora/en) instead of the Chinese corpus.
#
# Each run writes OUT/RUN.quantize.json (bonsai quantize --json), OUT/RUN.ppl.json (bonsai
# perplexity --json) and OUT/RUN.log; a run whose .ppl.json exists is skipped, so the script can
# be resumed, or run as two instances sharing the list. Then OUT/table.md is rewritten from every
# run present. Environment: BONSAI (the binary, default build/cli/bonsai), BONSAI_SHARED_DIR
# (default ../shared), OUT (default build/results-stage1), THREADS (default 0: all cores), COMMIT
# (recorded in OUT/machine.json; default the working tree's HEAD).
set -euo pipefail
cd "$(dirname "$0")/.."
export BONSAI_SHARED_DIR=${BONSAI_SHARED_DIR:-../shared}
bonsai=${BONSAI:-build/cli/bonsai}
out=${OUT:-build/results-stage1}
threads=${THREADS:-0}
model=$BONSAI_SHARED_DIR/models/zh-tiny-qwen3
eval_text=$BONSAI_SHARED_DIR/corpora/zh/eval-debian-handbook-zh-CN.txt
plan=ternary-keep-embed-head-q8
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(bf16 q8_0 rtn-none rtn-hadamard absmean-none absmean-hadamard optimal-none
  optimal-hadamard gptq-none gptq-hadamard tune-none tune-hadamard gptq-none-en)
# The English sample is the stories260K evaluation text, and its MANIFEST.json says so, so the
# sampler refuses it in place (held-out text is never calibration text); for zh-tiny it is not
# held out, so the -en rows calibrate on a copy (13,207 Qwen3 tokens: the 128 windows overlap).
english=$out/tinystories_validation_100.txt
for f in "$model/model.safetensors" "$eval_text"; do
  [ -e "$f" ] || { echo "results_stage1: $f is missing (README: Getting the data)" >&2; exit 1; }
done
mkdir -p "$out"
cp "$BONSAI_SHARED_DIR/corpora/en/tinystories_validation_100.txt" "$english"

commit=${COMMIT:-$(git rev-parse HEAD)}
python3 - "$out/machine.json" "$commit" "$threads" <<'EOF'
import json, os, platform, sys
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
json.dump({"commit": sys.argv[2], "cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(int(mem) / 2**20, 1),
           "kernel": platform.release(), "threads": int(sys.argv[3])}, open(sys.argv[1], "w"), indent=1)
EOF

for run in "${runs[@]}"; do
  [ -e "$out/$run.ppl.json" ] && { echo "$run: done already"; continue; }
  # A run in progress holds OUT/RUN.lock, so two instances given overlapping lists share the work
  # (remove a lock left by an interrupted run by hand).
  mkdir "$out/$run.lock" 2>/dev/null || { echo "$run: running elsewhere ($out/$run.lock)"; continue; }
  echo "$run: start $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
  measured=$out/$run.gguf
  if [ "$run" = bf16 ]; then
    measured=$model
  elif [ "$run" = q8_0 ]; then
    nice "$bonsai" convert -m "$model" -o "$measured" --type q8_0 2>"$out/$run.log"
  else
    IFS=- read -r method rotation corpus <<<"$run"
    calib=()
    [ "$corpus" = en ] && calib=(--calib "$english")
    nice "$bonsai" quantize -m "$model" -o "$measured" --plan "$plan" --method "$method" --rotate "$rotation" \
      "${calib[@]}" --threads "$threads" --json >"$out/$run.quantize.json.tmp" 2>"$out/$run.log"
    mv "$out/$run.quantize.json.tmp" "$out/$run.quantize.json"
  fi
  nice "$bonsai" perplexity -m "$measured" -f "$eval_text" --ctx 512 --threads "$threads" --json \
    >"$out/$run.ppl.json.tmp" 2>>"$out/$run.log"
  mv "$out/$run.ppl.json.tmp" "$out/$run.ppl.json"
  rmdir "$out/$run.lock"
  echo "$run: $(python3 -c 'import json,sys; print("PPL %.2f" % json.load(open(sys.argv[1]))["ppl"])' "$out/$run.ppl.json"), load $(cut -d' ' -f1-3 /proc/loadavg)"
done

# The table: one row per run present, in the order above.
python3 - "$out" "$plan" <<'EOF'
import json, os, sys
out, plan = sys.argv[1], sys.argv[2]
order = ["bf16", "q8_0"] + [f"{m}-{r}" for m in ("rtn", "absmean", "optimal", "gptq", "tune")
                             for r in ("none", "hadamard")] + ["gptq-none-en"]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
base = load("bf16.ppl.json")
def mean_block_error(q):  # the quantize summary's relative output error, averaged over blk.* weights
    e = [v for k, v in q["rel_errors"].items() if k.startswith("blk.")]
    return sum(e) / len(e)
rows = ["| model | method | rotation | PPL | vs BF16 | file size | bits/weight (all / block linears) | mean rel. output error (block matrices) | quantize time |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for run in order:
    ppl = load(run + ".ppl.json")
    if ppl is None:
        continue
    rel = f"{100 * (ppl['ppl'] / base['ppl'] - 1):+.2f}%" if base else "?"
    if run == "bf16":
        size = os.path.getsize(ppl["model"] + "/model.safetensors") if os.path.isdir(ppl["model"]) else 0
        rows.append(f"| BF16 (safetensors) | - | - | {ppl['ppl']:.2f} ± {ppl['ppl_err']:.2f} | +0.00% | "
                    f"{size / 2**20:.1f} MiB | 16 | 0 | - |")
        continue
    if run == "q8_0":
        size = os.path.getsize(os.path.join(out, "q8_0.gguf"))
        rows.append(f"| Q8_0 GGUF (`bonsai convert`) | - | - | {ppl['ppl']:.2f} ± {ppl['ppl_err']:.2f} | {rel} | "
                    f"{size / 2**20:.1f} MiB | 8.5 | - | - |")
        continue
    q = load(run + ".quantize.json")
    method, rot, *corpus = run.split("-")
    if corpus:
        method += " (calibrated on English TinyStories)"
    rows.append(f"| PTQ1_0 GGUF, {plan} | {method} | {rot} | {ppl['ppl']:.2f} ± {ppl['ppl_err']:.2f} | {rel} | "
                f"{q['file_bytes'] / 2**20:.1f} MiB | {q['bpw_all']:.3f} / {q['bpw_block_linear']:.3f} | "
                f"{mean_block_error(q):.5f} | {q['seconds']:.0f} s |")
open(os.path.join(out, "table.md"), "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
EOF
