#!/usr/bin/env bash
# Builds the libFuzzer harnesses (the `fuzz` CMake preset: clang, ASan + UBSan) and runs each one
# with its seed corpus for a share of SECONDS (docs/RELIABILITY.md).
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]    default: 60 seconds over all harnesses
#
# Writes only under build-fuzz/: the build, the seed corpora (build-fuzz/fuzz-seeds/<harness>,
# the committed fuzz/corpus/<harness> plus files derived from the repository's models and data),
# the corpora the runs grow (build-fuzz/fuzz-corpus/<harness>, kept between runs), the logs
# (build-fuzz/fuzz-logs/<harness>.log) and crash reproducers (build-fuzz/fuzz-artifacts/<harness>/).
# Fails, naming the harness and the reproducer, on any crash, leak, timeout or sanitizer report.
#
# Environment: FUZZ_JOBS (build parallelism, default 2), RKV_SHARED_DIR (golden cases, default
# ../shared), FUZZ_MIN_SECONDS (the least time a harness gets, default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

total=${1:-60}
shift $(($# > 0 ? 1 : 0))
if ! [[ $total =~ ^[0-9]+$ ]] || [ "$total" -le 0 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS] [HARNESS...]" >&2
  exit 2
fi

# ---- prerequisites: clang with libFuzzer, cmake, ninja (scripts/setup.sh installs them) ---------
need_setup=0
for tool in clang++ cmake ninja pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || need_setup=1
done
if [ $need_setup -eq 0 ] &&
  ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
  clang++ -x c++ -fsanitize=fuzzer,address,undefined -o /dev/null - >/dev/null 2>&1; then
  need_setup=1
fi
if [ $need_setup -eq 1 ]; then
  echo "fuzz: clang++ with libFuzzer, cmake or ninja is missing; running scripts/setup.sh"
  ./scripts/setup.sh
fi

# ---- build ---------------------------------------------------------------------------------------
build=$root/build-fuzz
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake --preset fuzz
fi
cmake --build --preset fuzz -j "${FUZZ_JOBS:-2}"

all_harnesses=()
for src in fuzz/*.cpp; do
  all_harnesses+=("$(basename "$src" .cpp)")
done
if [ $# -gt 0 ]; then
  harnesses=("$@")
  for h in "${harnesses[@]}"; do
    [ -f "fuzz/$h.cpp" ] || { echo "fuzz: no harness $h (have: ${all_harnesses[*]})" >&2; exit 2; }
  done
else
  harnesses=("${all_harnesses[@]}")
fi

# ---- seed corpora: the committed seeds plus files derived from the repository -------------------
seeds=$build/fuzz-seeds
rm -rf "$seeds"
sep=$'\n--8<--\n'
for h in "${harnesses[@]}"; do
  mkdir -p "$seeds/$h"
  if [ -d "fuzz/corpus/$h" ]; then cp fuzz/corpus/"$h"/* "$seeds/$h/" 2>/dev/null || true; fi
done
tiny=models/rkv-tiny-reasoner
derive() {  # derive HARNESS NAME: stdin becomes a seed of HARNESS when that harness runs
  if [ -d "$seeds/$1" ]; then cat >"$seeds/$1/$2"; else cat >/dev/null; fi
}
derive safetensors steering.safetensors <"$tiny/steering.safetensors"
# The tiny model's own header (its tensor data left out: data_offsets then lie past the end).
header_len=$(od -An -t u8 -N 8 "$tiny/model.safetensors" | tr -d ' ')
head -c $((8 + header_len)) "$tiny/model.safetensors" | derive safetensors tiny_header.safetensors
{ cat "$tiny/config.json"; printf '%s' "$sep"; cat "$tiny/generation_config.json"; } |
  derive config tiny.json
{ cat "$tiny/tokenizer.json"; printf '%s' "$sep"; cat "$tiny/tokenizer_config.json"; } |
  derive tokenizer_json tiny.json
{ printf '\001'; cat "$tiny/example_prompt.txt"; } | derive tokenizer_encode example_prompt.txt
{ printf '\000'; head -c 4000 "$tiny/README.md"; } | derive tokenizer_encode readme.txt
{ printf '\000'; head -n 3 data/chains_test.jsonl; } | derive dataset chains_test.jsonl
for i in 1 2 3 4 5 6 7 8; do
  sed -n "${i}p" tests/data/grading_corpus.jsonl | derive eval_answer "grading_corpus_$i.txt"
done
golden=${RKV_SHARED_DIR:-$root/../shared}/golden/compression
if [ -d "$seeds/golden_case" ] && [ -d "$golden" ]; then
  # At most three real golden cases, the smallest under 120 KB (the others are large and slow to
  # mutate; the committed fuzz/corpus/golden_case/mini_* are miniatures of every kind of case).
  find "$golden" -maxdepth 1 -name '*.json' -size -120k -printf '%s %p\n' 2>/dev/null |
    sort -n | head -n 3 | while read -r _ f; do cp "$f" "$seeds/golden_case/"; done
fi

chat_templates=${RKV_SHARED_DIR:-$root/../shared}/golden/chat_templates/templates
if [ -d "$seeds/jinja" ] && [ -d "$chat_templates" ]; then
  cp "$chat_templates"/*.jinja "$seeds/jinja/"  # the 45 golden chat templates
fi

# Per-input cap on the size of what a harness is fed: none by default (libFuzzer picks it from the
# corpus); eval_answer's expression parser and grader are legitimately super-linear (docs).
max_len_for() {
  case "$1" in
    eval_answer) echo "-max_len=4096" ;;
    *) echo "" ;;
  esac
}

# ---- run -------------------------------------------------------------------------------------------
n=${#harnesses[@]}
min=${FUZZ_MIN_SECONDS:-5}
per=$((total / n))
[ "$per" -lt "$min" ] && per=$min
echo "fuzz: ${n} harness(es), ${per}s each"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
summary=()
for h in "${harnesses[@]}"; do
  corpus=$build/fuzz-corpus/$h
  artifacts=$build/fuzz-artifacts/$h
  log=$build/fuzz-logs/$h.log
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  set +e
  # shellcheck disable=SC2046  # max_len_for gives zero or one word
  (cd "$build" && "$build/fuzz/fuzz_$h" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" $(max_len_for "$h") \
    "$corpus" "$seeds/$h") >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  last=$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: ' | tail -n 1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  files=$(find "$corpus" -type f | wc -l)
  line=$(printf '%-20s %6ss  execs %-10s exec/s %-7s cov %-6s ft %-7s corpus %s files' \
    "$h" "$per" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$files")
  crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
  if [ $rc -ne 0 ] || grep -qE '^(==[0-9]+==ERROR|SUMMARY: (Address|Undefined|Leak)Sanitizer)|runtime error:' "$log"; then
    failed+=("$h")
    line="$line  FAILED (exit $rc): ${crash:-no reproducer written}; log $log"
    echo "fuzz: harness $h FAILED: reproducer ${crash:-none}; see $log" >&2
    grep -E 'ERROR:|runtime error:|SUMMARY:|terminate called|what\(\)|ALARM|out-of-memory' "$log" |
      head -n 8 >&2 || true
  fi
  summary+=("$line")
  echo "$line"
done

echo
echo "fuzz: summary"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (reproduce: build-fuzz/fuzz/fuzz_<harness> <crash file>)" >&2
  exit 1
fi
echo "fuzz: all ${n} harness(es) ran clean"
