#!/usr/bin/env bash
# Ablations behind docs/RESULTS.md: for rkv, gkv and skipkv, one `--kv-*` setting changed at a
# time from the setup of tools/tiny/results.sh (preset, --kv-buffer 16, skipkv's keyword), greedy
# on all 200 held-out problems at budgets 96 and 224. Each variant is one `rkv eval` run in
# runs/tiny/ablate/<method>/<variant>/ (resumable: run the script again after an interruption);
# the unchanged presets come from the same runs' "default" variant. Then
#   python3 tools/tiny/ablation_table.py runs/tiny/ablate --plot docs/results/tiny_ablation.svg
# prints the tables of docs/RESULTS.md and draws the plot. About 35 minutes on 2 cores.
#
#   tools/tiny/ablate.sh [METHOD...]     default: rkv gkv skipkv
#   RKV_ABLATE_ONLY="default lambda-0" tools/tiny/ablate.sh rkv    some variants only
set -euo pipefail
cd "$(dirname "$0")/../.."
rkv=build/rkv
# The second model: RKV_TINY_FAMILY=redundant (models/rkv-tiny-redundant, data/redundant_test.jsonl,
# preset redundant; tools/tiny/results_redundant.sh).
family=${RKV_TINY_FAMILY:-chains}
case $family in
  chains) model=models/rkv-tiny-reasoner ;;
  redundant) model=models/rkv-tiny-redundant ;;
  *) echo "unknown RKV_TINY_FAMILY $family (chains, redundant)" >&2; exit 2 ;;
esac
data=data/${family}_test.jsonl
out=${RKV_ABLATE_DIR:-runs/tiny/ablate}
threads=${RKV_THREADS:-2}
budgets=${RKV_ABLATE_BUDGETS:-96,224}
common=(--preset "$family" --budgets "$budgets" --temp 0 -t "$threads" --limit "${RKV_LIMIT:-0}")

# method  variant-name  flags...   (the presets' values: rkv window 8, kernel 7, lambda 0.1,
# threshold 0.5; gkv window 16, lambda 0.5, smoothing max, decay 0.8, redundancy on, pooling
# off (kernel 5 when on), normalisation on; skipkv as rkv with sigma 0.1, tau 0.95). The
# keyword only drives steering, so skipkv's eviction has no keyword variant; tau 1 turns the
# sentence penalty off (no cosine exceeds 1), which leaves exactly rkv's preset.
variants() {
  cat <<'EOF'
rkv default
rkv kernel-1 --kv-kernel 1
rkv kernel-3 --kv-kernel 3
rkv window-16 --kv-window 16
rkv lambda-0 --kv-lambda 0
rkv lambda-1 --kv-lambda 1
rkv threshold-0.8 --kv-threshold 0.8
gkv default
gkv decay-0 --kv-decay 0
gkv no-norm --kv-disable-norm on
gkv smoothing-none --kv-smoothing none
gkv smoothing-mean --kv-smoothing mean
gkv no-redundancy --kv-redundancy off
gkv pooling-on --kv-pooling on
gkv lambda-0.1 --kv-lambda 0.1
skipkv default
skipkv tau-1 --kv-tau 1
skipkv sigma-1 --kv-sigma 1
skipkv kernel-1 --kv-kernel 1
EOF
}

want=("$@")
[ ${#want[@]} -eq 0 ] && want=(rkv gkv skipkv)
# RKV_ABLATE_ONLY="default lambda-0 ...": only these variants (default: all)
only=${RKV_ABLATE_ONLY:-}
keep() { [ -z "$only" ] || case " $only " in *" $1 "*) true ;; *) false ;; esac; }
total=$(variants | awk -v w=" ${want[*]} " -v o=" $only " \
  'index(w, " " $1 " ") && (o == "  " || index(o, " " $2 " "))' | wc -l)
i=0
while read -r method name flags; do
  case " ${want[*]} " in *" $method "*) ;; *) continue ;; esac
  keep "$name" || continue
  i=$((i + 1))
  dir="$out/$method/$name"
  echo "== [$i/$total] $method $name ${flags:-(preset)}"
  # results.sh's buffer and keyword unless the variant changes them
  extra=()
  case " $flags " in *" --kv-buffer "*) ;; *) extra+=(--kv-buffer 16) ;; esac
  case " $flags " in *" --kv-keywords "*) ;; *) extra+=(--kv-keywords verify) ;; esac
  # shellcheck disable=SC2086  # flags are words
  $rkv eval -m $model --dataset $data "${common[@]}" "${extra[@]}" --methods "$method" $flags \
    -o "$dir" 2> >(grep -v 'ETA' >&2)
  printf '%s\n' "${flags}" >"$dir/flags.txt"
done < <(variants)
echo "== done: python3 tools/tiny/ablation_table.py $out"
