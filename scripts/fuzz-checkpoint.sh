#!/usr/bin/env bash
# Builds the checkpoint loader's libFuzzer target with clang-14 (ASan+UBSan)
# and fuzzes it for a bounded time; exits non-zero on any finding.
#   scripts/fuzz-checkpoint.sh          45 seconds
#   scripts/fuzz-checkpoint.sh 20       20 seconds
# Findings (crash-*, leak-*, timeout-*, oom-*) land in build-fuzz/findings/;
# replay one with build-fuzz/checkpoint_fuzz build-fuzz/findings/<file>.
set -euo pipefail

seconds="${1:-45}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"

CC=clang-14 CXX=clang++-14 cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target checkpoint_fuzz

# New inputs go to a scratch corpus; the committed seeds stay as they are.
mkdir -p "$build/corpus" "$build/findings"
rm -f "$build/findings"/*

status=0
"$build/checkpoint_fuzz" "$build/corpus" "$root/fuzz/corpus/checkpoint" \
  -dict="$root/fuzz/checkpoint.dict" \
  -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$build/findings/" -print_final_stats=1 || status=$?

if ((status != 0)) || compgen -G "$build/findings/*" >/dev/null; then
  echo "fuzz-checkpoint: FINDING (exit $status); inputs in $build/findings/" >&2
  exit 1
fi
echo "fuzz-checkpoint: clean after ${seconds}s"
