#!/usr/bin/env bash
# The second tiny model's results in docs/RESULTS.md ("A task where reflection is redundant"):
# every method greedy on the 200 held-out problems of data/redundant_test.jsonl at budgets of
# 10-33% of its mean chain, with results.sh's settings (--kv-buffer 16, skipkv's keyword
# `verify`), then the ablations of tools/tiny/ablate.sh on this model. Run from anywhere after
# building build/rkv; every eval run resumes where it stopped. Then
#   python3 tools/tiny/results_table.py runs/tiny-redundant/greedy runs/tiny-redundant/greedy-large
#   python3 tools/tiny/first_error.py runs/tiny-redundant/greedy/samples.jsonl
#   python3 tools/tiny/ablation_table.py runs/tiny-redundant/ablate
# print the tables.
#
#   tools/tiny/results_redundant.sh [--no-ablate]
set -euo pipefail
cd "$(dirname "$0")/../.."
rkv=build/rkv
model=models/rkv-tiny-redundant
data=data/redundant_test.jsonl
out=${RKV_RESULTS_DIR:-runs/tiny-redundant}
threads=${RKV_THREADS:-2}
methods=fullkv,random,streamingllm,h2o,snapkv,rkv,gkv,skipkv
# 10%, 19% and 33% of the mean fullkv chain (514 tokens), R-KV's range; 16 tokens of buffer.
budgets=${RKV_BUDGETS:-52,100,172}
# RKV_LIMIT=N: the first N problems only (docs/RESULTS.md's tables use all 200)
limit=${RKV_LIMIT:-0}
mkdir -p "$out"

echo "== greedy, the held-out problems (RKV_LIMIT=${limit}; 0: all 200)"
$rkv eval -m $model --dataset $data --preset redundant --budgets "$budgets" --kv-buffer 16 \
  --kv-keywords verify -t "$threads" --methods $methods --temp 0 --limit "$limit" -o "$out/greedy"
# TriAttention pins the prompt (74 tokens) inside its budget, which 52 cannot hold: its budgets
# that can, into the same run (docs/RESULTS.md, "TriAttention").
$rkv eval -m $model --dataset $data --preset redundant --budgets "${RKV_TRI_BUDGETS:-100,172}" \
  --kv-buffer 16 --kv-keywords verify -t "$threads" --methods fullkv,triattention --temp 0 \
  --limit "$limit" \
  -o "$out/greedy"
echo "== greedy at 50% and 67% of the chain (where the methods recover)"
$rkv eval -m $model --dataset $data --preset redundant --budgets "${RKV_LARGE_BUDGETS:-256,344}" \
  --kv-buffer 16 --kv-keywords verify -t "$threads" --methods $methods --temp 0 --limit "$limit" \
  -o "$out/greedy-large"

if [ "${1:-}" != "--no-ablate" ]; then
  echo "== ablations (tools/tiny/ablate.sh) at budgets 100 and 172"
  RKV_TINY_FAMILY=redundant RKV_ABLATE_DIR="$out/ablate" \
    RKV_ABLATE_BUDGETS=${RKV_ABLATE_BUDGETS:-100,172} tools/tiny/ablate.sh rkv gkv skipkv
fi
echo "== done: $out/greedy/summary.md"
