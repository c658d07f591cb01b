#!/usr/bin/env bash
# docs/RESULTS.md, "Post-training (issue 38)": greedy pass@1 against budget, every method, on the
# 200 held-out problems, for the models given (a base model and the models post_train.py adapted
# from it), then one table per method with the models as rows. Run from the repository root after
# building build/rkv:
#
#   tools/tiny/results_post_training.sh chains models/rkv-tiny-reasoner models/rkv-tiny-reasoner-*
#
# The first argument is the task family (chains or redundant: the held-out set and preset). Each
# model's run goes to runs/post-results/NAME (resumed when run again); about 10 minutes a model.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { sed -n 2,10p "$0"; exit 2; }
family=$1
shift
rkv=build/rkv
data=data/${family}_test.jsonl
out=${RKV_RESULTS_DIR:-runs/post-results}
threads=${RKV_THREADS:-2}
methods=fullkv,random,streamingllm,h2o,snapkv,rkv,gkv,skipkv
budgets=${RKV_BUDGETS:-24,48,96,160,224}
tri_budgets=${RKV_TRI_BUDGETS:-96,160,224}
dirs=()
for model in "$@"; do
  name=$(basename "$model")
  echo "== $name"
  $rkv eval -m "$model" --dataset "$data" --preset "$family" --budgets "$budgets" --kv-buffer 16 \
    --kv-keywords verify -t "$threads" --methods $methods --temp 0 -o "$out/$name"
  $rkv eval -m "$model" --dataset "$data" --preset "$family" --budgets "$tri_budgets" \
    --kv-buffer 16 -t "$threads" --methods fullkv,triattention --temp 0 -o "$out/$name"
  dirs+=("$out/$name")
done
python3 tools/tiny/results_post_table.py "${dirs[@]}"
