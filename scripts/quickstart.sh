#!/usr/bin/env bash
# The main job on a fresh machine: installs the build dependencies, builds rkv (build/rkv), and
# generates with R-KV compression on the model the repository ships, the tiny reasoning model
# (models/rkv-tiny-reasoner, tools/tiny): it works one held-out program line by line, with a KV
# cache capped at 224 entries per head, and ends with `Final answer: \boxed{3}`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target rkv
model=models/rkv-tiny-reasoner
./build/rkv generate -m "$model" -f "$model/example_prompt.txt" -n 1024 --temp 0 \
  --kv-method rkv --kv-budget 224 --kv-buffer 16
