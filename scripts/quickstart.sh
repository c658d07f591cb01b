#!/usr/bin/env bash
# The main job on a fresh machine: installs the build dependencies, builds rkv (build/rkv), and
# generates with R-KV compression on the model the repository ships. Until the trained tiny
# model exists (models/), that is a small random-weight checkpoint written by `rkv make-model`,
# so the text is gibberish; the point is the pipeline and the summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target rkv
model=models-cache/random-tiny
if [ ! -f "$model/model.safetensors" ]; then
  ./build/rkv make-model --shape tiny --dtype bf16 --seed 0 --out "$model"
fi
./build/rkv generate -m "$model" -p "Solve step by step: what is 17 + 25?" -n 256 --temp 0 \
  --kv-method rkv --kv-budget 64 --kv-buffer 32 --kv-window 8
