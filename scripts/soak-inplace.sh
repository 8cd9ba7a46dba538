#!/usr/bin/env bash
# Runs the in-place property test (random programs of fills, element writes,
# views and in-place ops, compiled backend against ref) with N fresh seeds in
# a row; stops at the first failure and prints the seed that replays it:
#   TESSEL_TEST_SEED=<seed> build/tests/property/property "<test name>"
#   scripts/soak-inplace.sh [N=1000] [build dir=build]
# Not part of `make test` (about a second a seed); run it after touching
# laziness, in-place writes, scheduling or lowering.
set -euo pipefail
n="${1:-1000}"
build="${2:-build}"
bin="$build/tests/property/property"
test_name="property: random in-place programs on the default CPU backend"
[[ -x "$bin" ]] || { echo "soak-inplace: $bin not built (run make build first)" >&2; exit 2; }
# A private copy, so a rebuild while the soak runs does not break it.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$bin" "$tmp/property"
bin="$tmp/property"
start=$(date +%s)
for ((i = 1; i <= n; i++)); do
  seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
  if ! out=$(TESSEL_TEST_SEED="$seed" "$bin" "$test_name" 2>&1); then
    echo "$out" | tail -40
    echo "soak-inplace: FAILED at run $i of $n, seed $seed"
    echo "replay: TESSEL_TEST_SEED=$seed $build/tests/property/property \"$test_name\""
    exit 1
  fi
done
echo "soak-inplace: $n seeds in a row passed in $(( $(date +%s) - start )) s"
