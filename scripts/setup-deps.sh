#!/usr/bin/env bash
# Installs what tessel needs to build and test, from Debian 12 packages only.
# Idempotent: apt-get runs only when a package is missing.
#   scripts/setup-deps.sh            build + test dependencies
#   scripts/setup-deps.sh --bench    also the benchmark peers (LibTorch; PyPI peers in a venv)
# The interop test's Python side (PyTorch and numpy from Debian, safetensors
# from PyPI) goes into a venv at $TESSEL_PYENV (default ~/.cache/tessel-pyenv).
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev      # Boost.Hana (header-only)
  libfmt-dev            # printing
  catch2                # tests
  llvm-15-dev           # CPU JIT (ORC); optional at configure time
  libopenblas-dev       # matmul
  libdnnl-dev           # convolutions on CPU (oneDNN); optional at configure time
  libxxhash-dev         # kernel keys and checksums
  libgloo-dev           # collectives for distributed training (CPU)
  nlohmann-json3-dev    # safetensors headers, manifests
  zlib1g-dev            # Fashion-MNIST IDX .gz files
  libcli11-dev          # tessel-ckpt
  libbenchmark-dev      # make bench
  dataset-fashion-mnist # the demo's data
  gnuplot-nox           # training curves as PNG
  fortunes              # the GPT sample's corpus (samples/gpt: /usr/share/games/fortunes)
  python3-torch python3-numpy python3-venv  # interop test (ctest -L interop)
)
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(libtorch-dev)
  pkgs+=(clang)  # tinygrad's CPU device compiles its kernels with clang (bench venv below)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup-deps: all ${#pkgs[@]} packages present"
else
  echo "setup-deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Debian's /usr/bin/python3 is the one that sees python3-torch; the venv adds
# safetensors from PyPI on top of the system packages.
SAFETENSORS_VERSION=0.8.0
pyenv="${TESSEL_PYENV:-$HOME/.cache/tessel-pyenv}"
if "$pyenv/bin/python" -c "import safetensors, sys; sys.exit(safetensors.__version__ != '$SAFETENSORS_VERSION')" 2>/dev/null; then
  echo "setup-deps: $pyenv has safetensors $SAFETENSORS_VERSION"
else
  echo "setup-deps: creating $pyenv with safetensors $SAFETENSORS_VERSION"
  /usr/bin/python3 -m venv --system-site-packages "$pyenv"
  "$pyenv/bin/python" -m pip install -q --disable-pip-version-check "safetensors==$SAFETENSORS_VERSION"
fi

# --bench: the PyPI peers of bench/python_peers/peers.py (PyTorch 2.x eager and
# torch.compile, JAX, tinygrad) in a venv of their own, apart from the interop
# venv and Debian's torch 1.13: $TESSEL_BENCH_PYENV (default
# ~/.cache/tessel-bench-pyenv). Pinned to versions measured to work on Debian
# 12's Python 3.11 (2026-12-06). PyPI's torch wheel brings its nvidia-* CUDA
# wheels (about 6 GB in all); the CPU path uses none of them. torch.compile
# needs g++ (build-essential), tinygrad clang. A failed install is a warning:
# run_benchmarks then reports these peers as missing.
if [[ "${1:-}" == "--bench" ]]; then
  bench_py_pins=(torch==2.15.0 jax==0.10.2 jaxlib==0.10.2 tinygrad==0.14.0)
  benv="${TESSEL_BENCH_PYENV:-$HOME/.cache/tessel-bench-pyenv}"
  bench_pins_present() {
    "$benv/bin/python" -c '
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (a.split("==") for a in sys.argv[1:])))' "${bench_py_pins[@]}" 2>/dev/null
  }
  if bench_pins_present; then
    echo "setup-deps: $benv has ${bench_py_pins[*]}"
  else
    echo "setup-deps: installing ${bench_py_pins[*]} into $benv (PyPI, several GB)"
    if /usr/bin/python3 -m venv "$benv" &&
       "$benv/bin/python" -m pip install -q --disable-pip-version-check "${bench_py_pins[@]}" &&
       bench_pins_present; then
      echo "setup-deps: $benv ready"
    else
      echo "setup-deps: warning: could not install the PyPI bench peers into $benv;" \
           "run_benchmarks will report them as missing" >&2
    fi
  fi
fi
