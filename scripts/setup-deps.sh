#!/usr/bin/env bash
# Installs what tessel needs to build and test, from Debian 12 packages only.
# Idempotent: apt-get runs only when a package is missing.
#   scripts/setup-deps.sh            build + test dependencies
#   scripts/setup-deps.sh --bench    also the benchmark peers (LibTorch)
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev      # Boost.Hana (header-only)
  libfmt-dev            # printing
  catch2                # tests
  llvm-15-dev           # CPU JIT (ORC); optional at configure time
  libopenblas-dev       # matmul
  libxxhash-dev         # kernel keys and checksums
  nlohmann-json3-dev    # safetensors headers, manifests
  zlib1g-dev            # Fashion-MNIST IDX .gz files
  libcli11-dev          # tessel-ckpt
  libbenchmark-dev      # make bench
  dataset-fashion-mnist # the demo's data
  gnuplot-nox           # training curves as PNG
)
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(libtorch-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
