#!/usr/bin/env bash
# Fresh Debian machine -> built bonsai -> the main job on the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target bonsai
scripts/demo.sh
