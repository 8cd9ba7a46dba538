#!/usr/bin/env bash
# The check to run on a machine with an NVIDIA GPU and CUDA 13 (no network
# needed): configure and build tessel in Release in build-gpu/, run the tests
# labelled gpu, driver, nvrtc or seed on the real device (the DSL end to end
# on the device, the backend against ref, split reductions, vectorized
# kernels, cuBLASLt products and fused epilogues, cuDNN convolutions and
# their gradients against the CPU, in-place writes, optimizer steps, random
# in-place programs, the chapter's samples, the nccl backend's collectives and
# DDP: every test the emulated-gpu suite runs, except the emulator's own),
# train the demo on the
# GPU when the Fashion-MNIST files are there, measure the GPU figures (fused
# elementwise chain and a full sum vs a device-to-device copy; MLP forward vs
# cuBLAS alone), print one summary line. Ends within 8 minutes: each stage
# gets what is left of the budget.
#
#   scripts/gpu-check.sh
#   BUILD_DIR=/tmp/tessel-gpu JOBS=16 scripts/gpu-check.sh
#
# The nccl tests (tests/distributed/nccl_test.cpp) run one rank per GPU as
# threads of one process, at most 2: real NCCL cannot put two ranks on one
# GPU, so a 1-GPU machine runs them as a world of 1 (the library, its streams
# and the ordering after computation still run for real) and skips, with a
# printed reason, the cases that need two ranks to disagree or hang.
#
# Exit status 0 when everything built and passed. The full log is in
# <build dir>/gpu-check.log; a failing test's output is printed above the summary.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
jobs=${JOBS:-$(nproc)}
budget=${GPU_CHECK_BUDGET_S:-465}  # 7:45, leaving room under 8 minutes
labels='gpu|driver|nvrtc|seed'
start=$(date +%s)
mkdir -p "$build"
log=$build/gpu-check.log
: >"$log"

left() { echo $((budget - ($(date +%s) - start))); }
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 | sed 's/, / driver /')
gpu=${gpu:-"no GPU visible to nvidia-smi"}

summary() {  # status, details
  echo "gpu-check: $1 - $2; GPU: $gpu; $(($(date +%s) - start)) s total; log $log"
}

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi

t0=$(date +%s)
if ! timeout "$(left)" cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTESSEL_BUILD_TESTS=ON -DTESSEL_BUILD_SAMPLES=ON -DTESSEL_BUILD_BENCH=OFF -DTESSEL_BUILD_FUZZ=OFF \
  >>"$log" 2>&1; then
  tail -n 30 "$log"
  summary FAIL "configure failed"
  exit 1
fi
if ! grep -q "NVRTC found" "$log"; then
  echo "warning: CMake did not find NVRTC; nvrtc tests will only check the fallback" | tee -a "$log"
fi
configure_s=$(($(date +%s) - t0))

t0=$(date +%s)
# Leave at least 90 s for the tests.
build_limit=$(($(left) - 90))
if ((build_limit < 30)); then build_limit=30; fi
timeout "$build_limit" cmake --build "$build" --parallel "$jobs" >>"$log" 2>&1
rc=$?
build_s=$(($(date +%s) - t0))
if ((rc != 0)); then
  grep -E "error|Error" "$log" | tail -n 30
  if ((rc == 124)); then summary FAIL "build did not finish in ${build_limit} s"; else summary FAIL "build failed"; fi
  exit 1
fi

t0=$(date +%s)
test_out=$build/gpu-check-ctest.txt
timeout "$(left)" ctest --test-dir "$build" -L "$labels" -LE emulated --output-on-failure --timeout 180 -j 4 >"$test_out" 2>&1
rc=$?
cat "$test_out" >>"$log"
tests_s=$(($(date +%s) - t0))
result=$(grep -E "tests passed" "$test_out" | tail -n 1)
if ! grep -q "Start" "$test_out"; then result="no tests labelled $labels ran"; rc=1; fi

# NVRTC compile time, measured again alone (ctest ran tests in parallel).
timing=""
nvrtc_bin=$(find "$build" -name nvrtc_tests -type f -perm -u+x | head -1)
if [[ -n "$nvrtc_bin" ]] && (($(left) > 20)); then
  timing=$(timeout 20 "$nvrtc_bin" "[timing]" 2>/dev/null | grep -o "median compile of a small kernel: .*" | head -1)
fi
# The cuBLASLt the products ran on.
cublaslt=""
cublaslt_bin=$(find "$build" -name cublaslt_load -type f -perm -u+x | head -1)
if [[ -n "$cublaslt_bin" ]] && (($(left) > 20)); then
  cublaslt=$(timeout 20 "$cublaslt_bin" "cuBLASLt loads*" 2>/dev/null | grep -o "^cuBLASLt [0-9]* from .*" | head -1)
fi
# The cuDNN the convolutions ran on.
cudnn=""
cudnn_bin=$(find "$build" -name cudnn_load -type f -perm -u+x | head -1)
if [[ -n "$cudnn_bin" ]] && (($(left) > 20)); then
  cudnn=$(timeout 20 "$cudnn_bin" "cuDNN loads*" 2>/dev/null | grep -o "^cuDNN [0-9]* from .*" | head -1)
fi
# The NCCL the nccl backend ran on.
nccl=""
nccl_bin=$(find "$build" -name nccl_load -type f -perm -u+x | head -1)
if [[ -n "$nccl_bin" ]] && (($(left) > 20)); then
  nccl=$(timeout 20 "$nccl_bin" "NCCL loads*" 2>/dev/null | grep -o "^NCCL [0-9]* from .*" | head -1)
fi
# The demo on the GPU: its last line says device=cuda:0 (2 epochs: a check, not the figure).
demo=""
demo_bin=$build/samples/train_fashion_mnist
fmnist=${TESSEL_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [[ -x "$demo_bin" && -d "$fmnist" ]] && (($(left) > 60)); then
  mkdir -p "$build/demo"
  demo=$(cd "$build/demo" && timeout 60 "$demo_bin" 2 2>>"$log" | tee -a "$log" | grep "^final:" | tail -n 1)
  if [[ "$demo" != *"device=cuda:0"* ]]; then rc=1; fi
  demo=${demo:-"demo failed"}
else
  demo="demo skipped (no Fashion-MNIST files at $fmnist)"
fi
# GPU figures (tests/cuda_codegen/gpu_bench.cpp).
bench=""
bench_bin=$(find "$build" -name cuda_gpu_bench -type f -perm -u+x | head -1)
if [[ -n "$bench_bin" ]] && (($(left) > 30)); then
  bench_out=$(timeout $(($(left) - 10)) "$bench_bin" 2>&1)
  echo "$bench_out" >>"$log"
  echo "$bench_out" | grep "^gpu-bench:"
  bench=$(echo "$bench_out" | grep "^gpu-bench:" | sed 's/^gpu-bench: //' | paste -sd ';' - | sed 's/;/; /g')
fi
skipped=""
if grep -q "no GPU: skipped" "$build"/Testing/Temporary/LastTest.log 2>/dev/null; then
  skipped=" (gpu tests SKIPPED: tessel saw no CUDA device)"
fi

details="${result:-ctest gave no result}${skipped}; ${demo}; NVRTC ${timing:-timing not found}; ${cublaslt:-cuBLASLt not loaded}; ${cudnn:-cuDNN not loaded}; ${nccl:-NCCL not loaded}; ${bench:-no GPU figures}; configure ${configure_s} s, build ${build_s} s, tests ${tests_s} s"
if ((rc == 0)); then
  summary PASS "$details"
  exit 0
fi
grep -E "Failed|\*\*\*" "$test_out" | head -n 20
if ((rc == 124)); then details="tests did not finish in time; $details"; fi
summary FAIL "$details"
exit 1
