#!/usr/bin/env bash
# Compares two rkv builds' speed side by side: `rkv bench-decode` of OLD and NEW in alternating
# rounds (OLD, NEW, OLD, NEW, ...) on one model, once with fullkv and once with each further
# method given, and prints per test (pp, tg at each depth) both builds' median tokens/s and the
# median of the per-round ratios NEW/OLD (a ratio per round, so drift between rounds cancels).
#
#   scripts/compare-decode.sh OLD_RKV NEW_RKV MODEL [ROUNDS] [METHOD ...]
#   scripts/compare-decode.sh /tmp/rkv-old build/rkv /tmp/q05 5 rkv
#
# Environment: DEPTHS (default 0,4096), N_PROMPT (512), N_GEN (64), THREADS (nproc), and KV_ARGS
# for the compressing methods (default: --kv-budget 1024 --kv-buffer 128).
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
old=$1 new=$2 model=$3 rounds=${4:-5}
shift $(($# < 4 ? $# : 4))
methods=(fullkv "$@")
depths=${DEPTHS:-0,4096}
n_prompt=${N_PROMPT:-512}
n_gen=${N_GEN:-64}
threads=${THREADS:-$(nproc)}
kv_args=${KV_ARGS:---kv-budget 1024 --kv-buffer 128}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for method in "${methods[@]}"; do
  args=(-m "$model" -t "$threads" -d "$depths" -p "$n_prompt" -n "$n_gen" --no-limits
        --device cpu --kv-method "$method")
  # shellcheck disable=SC2206
  [ "$method" = fullkv ] || args+=($kv_args)
  for ((r = 1; r <= rounds; r++)); do
    for build in old new; do
      bin=$old
      [ $build = new ] && bin=$new
      echo "compare-decode: $method round $r/$rounds: $build" >&2
      "$bin" bench-decode "${args[@]}" --json "$out/$method.$build.$r.json" >/dev/null 2>&1
    done
  done
done
python3 - "$out" "$rounds" "${methods[@]}" <<'EOF'
import json, statistics, sys
out, rounds, methods = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| method | test | old tok/s | new tok/s | new/old (median of %d rounds) | new/old min-max |"
      % rounds)
print("|---|---|---:|---:|---:|---:|")
for m in methods:
    runs = {b: [json.load(open(f"{out}/{m}.{b}.{r}.json"))["results"] for r in range(1, rounds + 1)]
            for b in ("old", "new")}
    for i, row in enumerate(runs["old"][0]):
        name = row["test"] + (" @ %d" % row["depth"] if row["test"].startswith("tg") else "")
        old = [runs["old"][r][i]["tokens_per_second"] for r in range(rounds)]
        new = [runs["new"][r][i]["tokens_per_second"] for r in range(rounds)]
        ratios = [n / o for n, o in zip(new, old)]
        print("| %s | %s | %.2f | %.2f | %.3f | %.3f-%.3f |" % (m, name, statistics.median(old),
              statistics.median(new), statistics.median(ratios), min(ratios), max(ratios)))
EOF
