#!/usr/bin/env bash
# rkv's compression methods against the reference code the goldens came from, on random cases
# (tools/reference-check/compression_diff.py): R-KV's R1KV, SnapKV and StreamingLLM and G-KV's
# ScoreBasedKV, unmodified, under Debian's python3-torch. The references are fetched by whoever
# runs this (git clones of Zefan-Cai/R-KV and microsoft/G-KV), never vendored; their files are
# read at the goldens' commits with `git show`.
#
#   scripts/compression-crosscheck.sh R_KV_CLONE G_KV_CLONE [CASES [SEED]]
#
# CASES (default 300) alternate between the two repositories. Exits 1 on any difference.
set -euo pipefail
if [[ $# -lt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  [[ $# -lt 2 && "${1:-}" != "-h" && "${1:-}" != "--help" ]] && exit 2 || exit 0
fi
RKV_REF=$1 GKV_REF=$2 CASES=${3:-300} SEED=${4:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[[ -x "$ROOT/build/rkv" ]] || { echo "no $ROOT/build/rkv: build rkv first (README)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
R=d15c9767e67c2bd9807128fecc35223fa2484a69
G=6db3b2ee0846dea897c9afa9247d19f860491b49
git -C "$RKV_REF" show "$R:rkv/utils.py" > "$WORK/utils.py"
for f in r1_kv snapkv streamingllm; do
  git -C "$RKV_REF" show "$R:rkv/compression/$f.py" > "$WORK/$f.py"
done
git -C "$GKV_REF" show "$G:gkv/model/compression/score_based.py" > "$WORK/score_based.py"
git -C "$GKV_REF" show "$G:gkv/utils/compression_score.py" > "$WORK/compression_score.py"
PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 "$ROOT/tools/reference-check/compression_diff.py" \
  "$WORK" "$ROOT/build/rkv" "$WORK" "$CASES" "$SEED"
