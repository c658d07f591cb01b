#!/usr/bin/env bash
# Reproduces docs/RESULTS.md: accuracy against KV budget of every method on the tiny reasoning
# model (models/rkv-tiny-reasoner), through rkv's own engine. Run from the repository root after
# building build/rkv (scripts/quickstart.sh does). Writes runs/tiny/{greedy,greedy-bf16,greedy-f16,sampled,
# steer-greedy,steer-a0/*}/ (samples, summary.md, summary.json, accuracy.svg) and
# models/rkv-tiny-reasoner/steering.safetensors.
# Every eval run resumes where it stopped when run again. About 50 minutes on 2 cores (3 hours
# more with RKV_RESULTS_1600=1: the bf16-cache comparison on 1600 problems).
set -euo pipefail
cd "$(dirname "$0")/../.."
rkv=build/rkv
model=models/rkv-tiny-reasoner
data=data/chains_test.jsonl
out=${RKV_RESULTS_DIR:-runs/tiny}
threads=${RKV_THREADS:-2}
methods=fullkv,random,streamingllm,h2o,snapkv,rkv,gkv,skipkv
# ~5%, 10%, 20%, 35% and 50% of the mean fullkv chain (about 460 tokens); 16 tokens of buffer.
budgets=${RKV_BUDGETS:-24,48,96,160,224}
common=(--preset chains --budgets "$budgets" --kv-buffer 16 --kv-keywords verify -t "$threads")
mkdir -p "$out"

echo "== greedy, all 200 held-out problems"
$rkv eval -m $model --dataset $data "${common[@]}" --methods $methods --temp 0 -o "$out/greedy"

# TriAttention pins the prompt (71-77 tokens) inside its budget, which 24 and 48 cannot hold: its
# budgets that can, into the same run and plot (docs/RESULTS.md, "TriAttention").
$rkv eval -m $model --dataset $data --preset chains --budgets "${RKV_TRI_BUDGETS:-96,160,224}" \
  --kv-buffer 16 --kv-keywords verify -t "$threads" --methods fullkv,triattention --temp 0 \
  -o "$out/greedy"

echo "== greedy with a bf16 KV cache (docs/RESULTS.md, issue 16)"
$rkv eval -m $model --dataset $data "${common[@]}" --methods $methods --temp 0 --kv-dtype bf16 \
  -o "$out/greedy-bf16"

echo "== greedy with an f16 KV cache, and both paired with f32 (docs/RESULTS.md, \"Paired\")"
$rkv eval -m $model --dataset $data "${common[@]}" --methods $methods --temp 0 --kv-dtype f16 \
  -o "$out/greedy-f16"
for dt in bf16 f16; do
  python3 tools/tiny/paired.py "$out/greedy/samples.jsonl" "$out/greedy-$dt/samples.jsonl"
done

if [ "${RKV_RESULTS_1600:-0}" = 1 ]; then
  # docs/RESULTS.md, "Eight times the problems": 1400 more held-out problems (seeds 8 and 9),
  # greedy with an f32 and a bf16 cache, paired. About 3 hours on 2 cores; off unless asked for.
  echo "== greedy, f32 and bf16 caches, 1600 problems"
  python3 tools/tiny/task.py --count 600 --seed 8 --out "$out/seed8.jsonl"
  python3 tools/tiny/task.py --count 800 --seed 9 --out "$out/seed9.jsonl"
  cat $data "$out/seed8.jsonl" "$out/seed9.jsonl" > "$out/chains1600.jsonl"
  for dt in f32 bf16; do
    $rkv eval -m $model --dataset "$out/chains1600.jsonl" "${common[@]}" --methods $methods \
      --temp 0 --kv-dtype $dt -o "$out/greedy1600-$dt"
  done
  python3 tools/tiny/paired.py "$out/greedy1600-f32/samples.jsonl" \
    "$out/greedy1600-bf16/samples.jsonl"
fi

echo "== 4 samples at temperature 0.6 (top-p 0.95), the first 100 problems"
$rkv eval -m $model --dataset $data "${common[@]}" --methods $methods --samples 4 --temp 0.6 \
  --top-p 0.95 --limit 100 -s 1 -o "$out/sampled"

echo "== SkipKV adaptive steering: calibration on 64 training-distribution programs"
python3 tools/tiny/task.py --count 64 --seed 11 --out "$out/calibration.jsonl"
$rkv steer-calibrate -m $model --dataset "$out/calibration.jsonl" --prompt-suffix "" -n 1024 \
  --temp 0 -t "$threads" --out $model/steering.safetensors --thoughts "$out/thoughts.jsonl"
steer=(--steering $model/steering.safetensors)
# The spec's defaults (a0 1.0, gamma 0.02; ALGORITHMS.md 5), full budget range.
$rkv eval -m $model --dataset $data "${common[@]}" --methods fullkv,skipkv "${steer[@]}" \
  --steer-a0 1.0 --steer-gamma 0.02 --temp 0 -o "$out/steer-greedy"
# Strength sweep on the full cache (greedy, first 50 problems).
for a0 in 0.1 0.3 0.4 0.5 0.7 -0.4 -0.7 -1.0; do
  $rkv eval -m $model --dataset $data --preset chains --methods fullkv "${steer[@]}" \
    --steer-a0="$a0" --steer-gamma 0 --temp 0 --limit 50 -t "$threads" -o "$out/steer-a0/$a0"
done
echo "== done: $out/*/summary.md"
