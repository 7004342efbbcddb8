#!/usr/bin/env bash
# Installs the Debian packages bonsai builds with (idempotent; needs root or sudo). libtorch-dev is
# optional for the build (quantize's method tune needs it; without it the rest builds and tune says
# so) but installed here so that CI builds and tests tune. slurm-wlm and munge: the Slurm job-array
# test of `bonsai sweep` (tests/mixed/sweep_slurm_slow_test.cpp) starts its own one-node cluster.
set -euo pipefail
pkgs=(g++ cmake ninja-build pkg-config libboost-program-options-dev libeigen3-dev nlohmann-json3-dev
      libyaml-cpp-dev libpcre2-dev libutf8proc-dev libxxhash-dev libssl-dev zlib1g-dev libgtest-dev libomp-dev
      libopenblas-openmp-dev liblapacke-dev
      libtorch-dev
      slurm-wlm munge)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
