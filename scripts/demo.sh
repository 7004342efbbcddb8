#!/usr/bin/env bash
# The main job on the default model: for now (until the runtime and quantizer land), inspect it.
# The default model is zh-tiny-qwen3 from the shared fixtures (../shared), else stories260K.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${BONSAI_SHARED_DIR:-../shared}
for m in "$shared/models/zh-tiny-qwen3" "$shared/models/stories260K/stories260K.gguf"; do
  if [ -e "$m" ]; then
    exec build/cli/bonsai inspect "$m" --no-tensors
  fi
done
echo "no default model found under $shared/models (see README: Getting the data)" >&2
exit 1
