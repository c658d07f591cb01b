#!/usr/bin/env bash
# scripts/side-by-side.sh's table, worked by hand: the script runs against a fake llama-bench and
# a fake rkv (below) that print, round by round, figures chosen so that each median and each
# median of per-round ratios is known; the check compares the printed rows with them.
#
#   tests/tools/side_by_side_check.sh [path/to/side-by-side.sh]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
script=${1:-$here/scripts/side-by-side.sh}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/files"

# Round r (1-3) of each fake is the count of its own earlier calls of that kind, plus one.
# llama.cpp: pp512 100, 200, 300 tokens/s; tg16 at depth 0 40, 20, 30; at depth 16384 4, 2, 3
# (flash attention on; off is 1 token/s below, so the best of the two is the figure above).
cat > "$tmp/llama-bench" <<'EOF'
#!/usr/bin/env bash
dir=$(dirname "$0")
args=" $* "
kind=tg; [[ $args == *" -n 0 "* ]] && kind=pp
r=$(( $(cat "$dir/llama.$kind" 2>/dev/null || echo 0) + 1 )); echo $r > "$dir/llama.$kind"
fa=$(sed -E 's/.* -fa ([^ ]+) .*/\1/' <<<"$args")
depths=$(sed -E 's/.* -d ([^ ]+) .*/\1/' <<<"$args"); [[ $args == *" -d "* ]] || depths=0
rows=()
for f in ${fa//,/ }; do
  off=$(( f == 1 ? 0 : 1 ))
  if [ $kind = pp ]; then
    rows+=("{\"n_prompt\": 512, \"n_gen\": 0, \"n_depth\": 0, \"avg_ts\": $(( 100 * r - off )), \"build_commit\": \"fake123\"}")
  else
    for d in ${depths//,/ }; do
      v=$(( d == 0 ? (r == 1 ? 40 : r == 2 ? 20 : 30) : (r == 1 ? 4 : r == 2 ? 2 : 3) ))
      rows+=("{\"n_prompt\": 0, \"n_gen\": 16, \"n_depth\": $d, \"avg_ts\": $(( v - off ))}")
    done
  fi
done
(IFS=,; echo "[${rows[*]}]")
EOF
# rkv: pp512 150, 500, 330 (ratios to llama.cpp 1.5, 2.5, 1.1: median 1.5); tg16 at depth 0 10,
# 20, 12 (ratios 0.25, 1.0, 0.4: median 0.4); R-KV at budget 2048 at depth 16384 9, 10, 11
# and at its own depth 0, decoded in turn with it, 12, 11, 10 (per round 0.75, 0.909, 1.1:
# median 91%); fraction of the limit 0.5 for pp, 0.8 for tg; the limits measured around each
# row, per round: compute 100, 110, 120 GFLOP/s, reads 40, 50, 60 GB/s. Each call's -r goes to
# rkv.reps, the budget calls' arguments to rkv.budget.args.
cat > "$tmp/rkv" <<'EOF'
#!/usr/bin/env bash
dir=$(dirname "$0")
if [ "$1" = make-model ]; then
  while [ $# -gt 0 ]; do [ "$1" = -o ] && touch "$2"; shift; done
  exit 0
fi
args=" $* "
kind=full; [[ $args == *" --kv-method rkv "* ]] && kind=budget
r=$(( $(cat "$dir/rkv.$kind" 2>/dev/null || echo 0) + 1 )); echo $r > "$dir/rkv.$kind"
json=$(sed -E 's/.* --json ([^ ]+) .*/\1/' <<<"$args")
sed -E 's/.* -r ([^ ]+) .*/\1/' <<<"$args" >> "$dir/rkv.reps"
depths=$(sed -E 's/.* -d ([^ ]+) .*/\1/' <<<"$args")
rows=()
if [ $kind = full ]; then
  pp=$( [ $r = 1 ] && echo 150 || { [ $r = 2 ] && echo 500 || echo 330; })
  tg=$( [ $r = 1 ] && echo 10 || { [ $r = 2 ] && echo 20 || echo 12; })
  rows+=("{\"test\": \"pp512\", \"depth\": 0, \"tokens_per_second\": $pp, \"fraction_of_limit\": 0.5, \"gflop_per_s\": 1, \"limit\": $(( 90 + 10 * r ))}")
  for d in ${depths//,/ }; do
    rows+=("{\"test\": \"tg16\", \"depth\": $d, \"tokens_per_second\": $tg, \"fraction_of_limit\": 0.8, \"gb_per_s\": 1, \"limit\": $(( 30 + 10 * r ))}")
  done
else
  echo "$args" >> "$dir/rkv.budget.args"
  for d in ${depths//,/ }; do
    rows+=("{\"test\": \"tg16\", \"depth\": $d, \"tokens_per_second\": $(( d == 0 ? 13 - r : 8 + r ))}")
  done
fi
(IFS=,; echo "{\"build_commit\": \"rkvfake7\", \"machine_limits\": {\"threads\": 2, \"compute\": \"fake\", \"measured\": \"just before and after each timed repetition\"}, \"results\": [${rows[*]}]}") > "$json"
EOF
chmod +x "$tmp/llama-bench" "$tmp/rkv"

# Runs the script in a fresh folder (the fakes count their calls there) with extra settings.
run_case() {
  rm -f "$tmp"/llama.* "$tmp"/rkv.*
  env RKV="$tmp/rkv" FILES="$tmp/files" SHAPES="fake:q4_k_m" DEPTHS=0,16384 BUDGET=2048 \
    N_GEN=16 "$@" "$script" "$tmp/llama-bench" 3 2>"$tmp/log" || { cat "$tmp/log"; exit 1; }
}

status=0
expect() {
  if grep -qxF -- "$1" <<<"$table"; then
    echo "ok   $1"
  else
    echo "FAIL missing: $1"
    status=1
  fi
}

# Without rkv's full cache at 16384 and with llama.cpp's two flash-attention settings.
table=$(run_case LLAMA_FA=0,1 RKV_FULL_DEPTHS=0)
echo "$table"
# pp: llama.cpp median 200, rkv median 330, fraction 50%, llama.cpp's 50% x 200/330 = 30%
expect "| fake-q4_k_m | pp512 | 200.0 | 30% | 330.0 | 50% | 1.50 | - |"
# tg at 0: llama.cpp 30, rkv 12, 80%; llama.cpp's 80% x 30/12 = 200%
expect "| fake-q4_k_m | tg16 @ 0 | 30.0 | 200% | 12.0 | 80% | 0.40 | - |"
# tg at 16384: rkv's full cache not run there (RKV_FULL_DEPTHS=0); the budget's median 10
expect "| fake-q4_k_m | tg16 @ 16384 | 3.0 | - | - | - | - | 10.0 |"
# each round's depth 0 of the budget's own run (12, 11, 10; not the full cache's 10, 20, 12) and
# budget (9, 10, 11) figures, with their ratios 75%, 91%, 110%
note="fake-q4_k_m: rkv at R-KV budget 2048, tg16 @ 16384: 10.0 tokens/s, 91% of its depth 0 decoded in turn with it (11.0; the median of the per-round ratios; rounds, depth 0 -> tg16 @ 16384: 12.0 -> 9.0 (75%), 11.0 -> 10.0 (91%), 10.0 -> 11.0 (110%))"
expect "$note"
# the budget's run decodes depth 0 and the deep depth in turn, every round
if [ "$(grep -c -- " -d 0,16384 .*--interleave " "$tmp/rkv.budget.args")" != 3 ]; then
  echo "FAIL the budget's runs: $(cat "$tmp/rkv.budget.args") (want -d 0,16384 and --interleave, 3 times)"
  status=1
fi
# both commits as the binaries report them (rkv's build_commit, not this checkout's HEAD)
grep -q "; rkv rkvfake7; llama.cpp fake123; .*; 3 rounds, medians; a round's figure: llama.cpp's best of flash attention 0,1, rkv's best of 2 repetitions." <<<"$table" || { echo "FAIL header"; status=1; }
# the limits' range over every rkv row of the three rounds
expect "rkv's limits (2 threads), measured just before and after each of its timed tests: streaming read 40.0-60.0 GB/s; fake 100.0-120.0 GFLOP/s."
# as many samples as llama.cpp's two flash-attention settings: every rkv call ran -r 2
if [ "$(sort -u "$tmp/rkv.reps")" != 2 ]; then
  echo "FAIL rkv's repetitions: $(sort -u "$tmp/rkv.reps" | tr '\n' ' ') (want 2)"
  status=1
fi

# The defaults for rkv: its full cache at every depth, the same line under the table; llama.cpp with
# flash attention off alone (LLAMA_FA=0), 1 token/s below the figures above. pp: llama.cpp 99,
# 199, 299 (median 199; ratios 1.515, 2.513, 1.104: median 1.52; its fraction 50% x 199/330 =
# 30%). At 16384 rkv's full cache gives 10, 20, 12 (its fake's decode figures) against llama.cpp's
# 3, 1, 2 (median 2; ratios 3.3, 20, 6: median 6; its fraction 80% x 2/12 = 13%).
table=$(run_case LLAMA_FA=0)
echo "$table"
expect "| fake-q4_k_m | pp512 | 199.0 | 30% | 330.0 | 50% | 1.52 | - |"
expect "| fake-q4_k_m | tg16 @ 16384 | 2.0 | 13% | 12.0 | 80% | 6.00 | 10.0 |"
if [ "$(sort -u "$tmp/rkv.reps")" != 1 ]; then
  echo "FAIL rkv's repetitions with LLAMA_FA=0: $(sort -u "$tmp/rkv.reps" | tr '\n' ' ') (want 1)"
  status=1
fi
expect "$note"
exit $status
