#!/usr/bin/env bash
# Kills a process saving a 50 MB checkpoint at N random points (default 200)
# and checks after each kill that the file is the previous or the new
# checkpoint, whole; `make test` runs the same test with 50 kills.
#   scripts/soak-killed-save.sh [N=200] [build dir=build]
set -euo pipefail
n="${1:-200}"
build="${2:-build}"
bin="$build/tests/reliability/reliability"
[[ -x "$bin" ]] || { echo "soak-killed-save: $bin not built (run make build first)" >&2; exit 2; }
start=$(date +%s)
TESSEL_SOAK_KILLS="$n" "$bin" "a 50 MB save killed at random points leaves the old or the new checkpoint"
echo "soak-killed-save: $n kills passed in $(( $(date +%s) - start )) s"
