#!/usr/bin/env bash
# The main job on the embedded default: calibrate and quantize zh-tiny-qwen3 (from the shared
# fixtures) to PTQ1_0 with the default plan and method, then measure held-out perplexity of the
# BF16 original and of the quantized file on the Chinese evaluation text, and print both.
#
# Calibration: 32 windows x 512 tokens of ../shared/corpora/zh/calib-*.txt (seed 0), a quarter of
# the quantizer's default 128, so that the demo stays near 10 minutes on 2 cores: each whole-file
# perplexity run costs about 540 CPU-seconds (2.4 per 512-token chunk, 225 chunks; measured under
# load at c3909d8), so the two take ~9 minutes, and a 128-window gptq calibration 3-6 more.
# BONSAI_DEMO_WINDOWS=128 gives the default calibration (the figures in docs/results.md).
# Set BONSAI_SHARED_DIR to use fixtures elsewhere, BONSAI_DEMO_OUT for the output folder, and
# BONSAI_DEMO_CHUNKS=N to score only the first N chunks (a quick look; not the published figure).
set -euo pipefail
cd "$(dirname "$0")/.."
export BONSAI_SHARED_DIR=${BONSAI_SHARED_DIR:-../shared}
shared=$BONSAI_SHARED_DIR
bonsai=build/cli/bonsai
model=$shared/models/zh-tiny-qwen3
eval_text=$shared/corpora/zh/eval-debian-handbook-zh-CN.txt
out_dir=${BONSAI_DEMO_OUT:-build/demo}
windows=${BONSAI_DEMO_WINDOWS:-32}
chunks=${BONSAI_DEMO_CHUNKS:--1}

missing=()
[ -e "$model/model.safetensors" ] || missing+=("$model")
[ -e "$eval_text" ] || missing+=("$eval_text")
compgen -G "$shared/corpora/zh/calib-*.txt" >/dev/null || missing+=("$shared/corpora/zh/calib-*.txt")
if [ ${#missing[@]} -gt 0 ]; then
  {
    echo "demo: the default model and corpus were not found:"
    printf '  %s\n' "${missing[@]}"
    echo "They live in a shared/ folder beside the project root (or BONSAI_SHARED_DIR): see README.md,"
    echo "section \"Getting the data\". The Chinese corpus alone can be rebuilt from Debian packages with"
    echo "  $bonsai corpus build --out $shared/corpora/zh"
    echo "To quantize your own model instead: $bonsai quantize -m MODEL_DIR -o out.gguf --calib TEXT..."
  } >&2
  exit 1
fi
[ -x "$bonsai" ] || { echo "demo: $bonsai is not built (run scripts/setup.sh)" >&2; exit 1; }

mkdir -p "$out_dir"
quantized=$out_dir/zh-tiny-qwen3-ptq1_0.gguf
echo "== 1/3 quantize $model -> $quantized (default plan and method; $windows x 512 calibration tokens, the default is 128 x 512)"
"$bonsai" quantize -m "$model" -o "$quantized" --calib-windows "$windows"

# The last line of `bonsai perplexity` is "PPL = x +/- err".
ppl() { "$bonsai" perplexity -m "$1" -f "$eval_text" --ctx 512 --chunks "$chunks" 2>/dev/null | tail -n 1; }
what="whole file"
[ "$chunks" = -1 ] || what="first $chunks chunks only"
echo "== 2/3 perplexity of the BF16 original on $eval_text (ctx 512, $what)"
bf16=$(ppl "$model")
echo "$bf16"
echo "== 3/3 perplexity of the PTQ1_0 file"
quant=$(ppl "$quantized")
echo "$quant"

b=$(echo "$bf16" | awk '{print $3}')
q=$(echo "$quant" | awk '{print $3}')
echo
echo "zh-tiny-qwen3 held-out perplexity ($what): BF16 $b, PTQ1_0 $q ($(awk -v b="$b" -v q="$q" 'BEGIN{printf "%+.2f%%", 100*(q/b-1)}') against BF16; the stage-1 goal is <= 730)"
echo "sizes: $(du -h "$model/model.safetensors" | cut -f1) BF16 safetensors, $(du -h "$quantized" | cut -f1) PTQ1_0 GGUF"
