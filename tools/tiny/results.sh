#!/usr/bin/env bash
# Reproduces docs/RESULTS.md: accuracy against KV budget of every method on the tiny reasoning
# model (models/rkv-tiny-reasoner, once tools/tiny/train.py has produced one that works), through
# rkv's own engine. Run from the repository root after building build/rkv (scripts/quickstart.sh
# does). Writes runs/tiny/{greedy,sampled,steer-*}/ (samples,
# summary.md, summary.json, accuracy.svg) and models/rkv-tiny-reasoner/steering.safetensors.
# Every eval run resumes where it stopped when run again. About 30 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
rkv=build/rkv
model=models/rkv-tiny-reasoner
data=data/chains_test.jsonl
out=${RKV_RESULTS_DIR:-runs/tiny}
threads=${RKV_THREADS:-2}
methods=fullkv,streamingllm,h2o,snapkv,rkv,gkv,skipkv
# ~5%, 10%, 20%, 35% and 50% of the mean fullkv chain (about 460 tokens); 16 tokens of buffer.
budgets=${RKV_BUDGETS:-24,48,96,160,224}
common=(--preset chains --budgets "$budgets" --kv-buffer 16 --kv-keywords verify -t "$threads")
mkdir -p "$out"

echo "== greedy, all 200 held-out problems"
$rkv eval -m $model --dataset $data "${common[@]}" --methods $methods --temp 0 -o "$out/greedy"

echo "== 4 samples at temperature 0.6 (top-p 0.95), the first 100 problems"
$rkv eval -m $model --dataset $data "${common[@]}" --methods $methods --samples 4 --temp 0.6 \
  --top-p 0.95 --limit 100 -s 1 -o "$out/sampled"

echo "== SkipKV adaptive steering: calibration on 64 training-distribution programs"
python3 tools/tiny/task.py --count 64 --seed 11 --out "$out/calibration.jsonl"
$rkv steer-calibrate -m $model --dataset "$out/calibration.jsonl" --prompt-suffix "" -n 1024 \
  --temp 0 -t "$threads" --out $model/steering.safetensors --thoughts "$out/thoughts.jsonl"
steer=(--steering $model/steering.safetensors --steer-a0 1.0 --steer-gamma 0.02)
$rkv eval -m $model --dataset $data "${common[@]}" --methods fullkv,skipkv "${steer[@]}" \
  --temp 0 -o "$out/steer-greedy"
$rkv eval -m $model --dataset $data "${common[@]}" --methods fullkv,skipkv "${steer[@]}" \
  --samples 4 --temp 0.6 --top-p 0.95 --limit 100 -s 1 -o "$out/steer-sampled"
echo "== done: $out/*/summary.md"
