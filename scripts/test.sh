#!/usr/bin/env bash
# Builds rkv and runs the whole test suite: the release build's tests (the server's JavaScript
# client tests among them), then the same tests under AddressSanitizer + UndefinedBehaviorSanitizer,
# then the engine, server and kernel tests under ThreadSanitizer. `scripts/test.sh --fast` skips the
# sanitizer runs.
# The golden files are read from ../shared (tests that need them skip, saying so, when absent).
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
for arg in "$@"; do
  case "$arg" in
    --fast) fast=1 ;;
    *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
  esac
done
./scripts/setup.sh
jobs=$(nproc)
presets=(release)
if [ "$fast" -eq 0 ]; then presets+=(asan tsan); fi
for preset in "${presets[@]}"; do
  echo "=== ${preset}: configure and build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== ${preset}: tests"
  ctest --preset "$preset" -j "$jobs"
done
