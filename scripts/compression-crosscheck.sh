#!/usr/bin/env bash
# rkv's compression methods against the reference code the goldens came from, on random cases
# (tools/reference-check/): R-KV's R1KV, SnapKV and StreamingLLM, G-KV's ScoreBasedKV
# (compression_diff.py) and TriAttention's compute_keep_indices and patched forward
# (triattention_diff.py, triattention_rounds_diff.py), run unmodified under Debian's
# python3-torch beside `rkv policy-run`. The references are fetched by whoever runs this (git clones of Zefan-Cai/R-KV, microsoft/G-KV, WeianMao/triattention), never
# vendored; their files are read at the goldens' commits with `git show`.
#
#   scripts/compression-crosscheck.sh --rkv-repo DIR --gkv-repo DIR [--triattention-repo DIR]
#                                     [--cases N] [--seed S]
#
# --rkv-repo and --gkv-repo go together; either pair or --triattention-repo alone will do.
# N cases (default 300) per script. Exits 1 on any difference.
set -euo pipefail
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
RKV_REF="" GKV_REF="" TRI_REF="" CASES=300 SEED=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rkv-repo) RKV_REF=$2; shift 2 ;;
    --gkv-repo) GKV_REF=$2; shift 2 ;;
    --triattention-repo) TRI_REF=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ -z "$TRI_REF" && ( -z "$RKV_REF" || -z "$GKV_REF" ) ]]; then usage >&2; exit 2; fi
if [[ -n "$RKV_REF" && -z "$GKV_REF" ]] || [[ -z "$RKV_REF" && -n "$GKV_REF" ]]; then
  echo "--rkv-repo and --gkv-repo go together" >&2; exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[[ -x "$ROOT/build/rkv" ]] || { echo "no $ROOT/build/rkv: build rkv first (README)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PYTHONDONTWRITEBYTECODE=1
status=0
if [[ -n "$RKV_REF" ]]; then
  R=d15c9767e67c2bd9807128fecc35223fa2484a69
  G=6db3b2ee0846dea897c9afa9247d19f860491b49
  mkdir -p "$WORK/kv"
  git -C "$RKV_REF" show "$R:rkv/utils.py" > "$WORK/kv/utils.py"
  for f in r1_kv snapkv streamingllm; do
    git -C "$RKV_REF" show "$R:rkv/compression/$f.py" > "$WORK/kv/$f.py"
  done
  git -C "$GKV_REF" show "$G:gkv/model/compression/score_based.py" > "$WORK/kv/score_based.py"
  git -C "$GKV_REF" show "$G:gkv/utils/compression_score.py" > "$WORK/kv/compression_score.py"
  /usr/bin/python3 "$ROOT/tools/reference-check/compression_diff.py" \
    "$WORK/kv" "$ROOT/build/rkv" "$WORK" "$CASES" "$SEED" || status=1
fi
if [[ -n "$TRI_REF" ]]; then
  T=c3744ee6a50522a1559a577f85aef2b165a344f2
  mkdir -p "$WORK/tri"
  for f in triattention pruning_utils; do
    git -C "$TRI_REF" show "$T:triattention/methods/$f.py" > "$WORK/tri/$f.py"
  done
  /usr/bin/python3 "$ROOT/tools/reference-check/triattention_diff.py" \
    "$WORK/tri" "$ROOT/build/rkv" "$WORK" "$CASES" "$SEED" || status=1
  /usr/bin/python3 "$ROOT/tools/reference-check/triattention_rounds_diff.py" \
    "$WORK/tri" "$ROOT/build/rkv" "$WORK" "$CASES" "$SEED" || status=1
fi
exit $status
