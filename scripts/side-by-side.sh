#!/usr/bin/env bash
# rkv beside llama.cpp on the same GGUF files, on this machine, in one run: the source of the
# summary table at the top of docs/PERFORMANCE.md.
#
#   scripts/side-by-side.sh LLAMA_BENCH [ROUNDS]
#   scripts/side-by-side.sh /tmp/llama.cpp/build/bin/llama-bench 3
#
# Writes the files with `rkv make-model` (random weights of real shapes, which llama.cpp loads as
# they are), then, for ROUNDS rounds (default 3), alternates per file: llama-bench (pp, then tg at
# each depth, flash attention off and on, its best of the two), `rkv bench-decode` with the full
# cache, for a bf16 or f16 file also in the llama.cpp-precision mode (--matmul-precision llamacpp,
# pp), and `rkv bench-decode` with R-KV at a budget (tg at the depths above the budget), each
# test of rkv the best of as many repetitions as llama.cpp has flash-attention settings (both
# engines the best of two samples a round by default; before 2026-12-01 rkv had one); each
# engine runs its own untimed warm-up before its tests (llama-bench's default, and rkv
# bench-decode's since 2026-11-28: before that rkv's first and only repetition of pp512 was also
# the first pass through its buffers, 6-8% slower on the bf16 file). Prints
# one markdown table of medians over the rounds (the ratio is the median of the per-round
# ratios), each figure also as a fraction of the machine's limit that rkv measures in the same
# run, just before and after each of its timed repetitions (streaming-read bandwidth for decode,
# the matrix-product peak for prompt processing; a
# llama.cpp figure's fraction is rkv's scaled by the two engines' speeds, the work per token
# being the same), and the CPU model, its ISA, both commits (as each binary reports its own) and
# the date. Below it, for each compressed deep test, a line with its ratio to rkv's depth-0 speed
# and each round's two figures: that depth 0 is decoded by the budget's own run, one step in turn
# with the deep depths (bench-decode --interleave, since 2026-12-02: before, the full cache's
# depth 0 of the round, measured minutes apart, on machines whose memory speed moves by tens of
# percent within minutes).
#
# llama.cpp is not part of rkv: fetch and build it yourself, e.g. (docs/PERFORMANCE.md says which
# build each table used; on a CPU with AMX, build without AMX, whose kernels die with SIGILL on
# quantized files there):
#   cmake -S llama.cpp -B llama.cpp/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
#     -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON \
#     -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DLLAMA_CURL=OFF
#   cmake --build llama.cpp/build --target llama-bench -j
#
# Environment:
#   RKV          the rkv binary (default: build/rkv of this repository)
#   FILES        where the GGUF files are written and kept between runs (default /tmp/rkv-side-by-side)
#   SHAPES       "shape:type ..." (default "qwen2.5-0.5b:bf16 r1-distill-qwen-1.5b:q4_k_m")
#   DEPTHS       decode depths (default 0,4096,16384)
#   N_PROMPT     prompt tokens of the pp test (default 512); N_GEN decoded tokens (default 64)
#   BUDGET       R-KV's budget for the compressed rows (default 1024; buffer 128)
#   LLAMA_FA     llama-bench's flash-attention settings, its best taken (default 0,1; at depth
#                16384 each setting is one more fill of the cache, so 1 alone is cheaper)
#   RKV_FULL_DEPTHS
#                depths at which rkv also decodes with its full cache (default: DEPTHS; e.g. 0
#                to skip the full cache's fill at 16384 when only the budget's row is wanted
#                there: that row's rkv columns then read "-"; the line under the table
#                gives the budget's speed against its own depth 0 as always)
#   LLAMA_DEEP_ROUNDS
#                the first rounds in which llama.cpp also decodes at the depths above the budget
#                (default: every round; 1 fills its full cache to 16384 once, about 17 minutes
#                for the Qwen3-30B-A3B file on the 2-core AVX2 machine of docs/PERFORMANCE.md;
#                its figure there is then one round's, and says so)
#   RKV_FILL     how rkv fills its cache to a depth at the budget: prefill (default: one prompt,
#                compressed once at its end) or stream (batches of the buffer, each compressed as
#                decoding does, so the cache never holds more than budget + buffer; bench-decode
#                --fill); at a depth that is a multiple of 128 (the buffer) the decode measured
#                after either reads the same number of entries
#   RKV_REPETITIONS
#                repetitions of each rkv test, its best taken (default: the number of LLAMA_FA
#                settings, so that both engines get as many samples)
#   KEEP         a folder in which to keep every run's JSON (default: a temporary one, removed)
#   THREADS      threads of both engines (default: nproc)
#   LLAMA_COMMIT what to print as llama.cpp's commit (default: what llama-bench reports)
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d' >&2
  exit 2
fi
llama_bench=$1
rounds=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
rkv=${RKV:-$here/build/rkv}
files=${FILES:-/tmp/rkv-side-by-side}
shapes=${SHAPES:-"qwen2.5-0.5b:bf16 r1-distill-qwen-1.5b:q4_k_m"}
depths=${DEPTHS:-0,4096,16384}
n_prompt=${N_PROMPT:-512}
n_gen=${N_GEN:-64}
budget=${BUDGET:-1024}
llama_fa=${LLAMA_FA:-0,1}
full_depths=${RKV_FULL_DEPTHS:-$depths}
llama_deep_rounds=${LLAMA_DEEP_ROUNDS:-$rounds}
rkv_fill=${RKV_FILL:-prefill}
threads=${THREADS:-$(nproc)}
rkv_reps=${RKV_REPETITIONS:-$(tr ',' '\n' <<<"$llama_fa" | grep -c .)}
[ -x "$llama_bench" ] || { echo "side-by-side: $llama_bench is not an executable" >&2; exit 2; }
[ -x "$rkv" ] || { echo "side-by-side: $rkv is not built (cmake --build build)" >&2; exit 2; }
mkdir -p "$files"
if [ -n "${KEEP:-}" ]; then
  out=$KEEP
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

# Depths above the budget: where a compressed cache differs from the full one.
deep=$(python3 -c "import sys; print(','.join(d for d in sys.argv[1].split(',') if int(d) > int(sys.argv[2])))" "$depths" "$budget")
shallow=$(python3 -c "import sys; print(','.join(d for d in sys.argv[1].split(',') if int(d) <= int(sys.argv[2])))" "$depths" "$budget")

names=()
for s in $shapes; do
  shape=${s%%:*} type=${s##*:}
  file=$files/$shape-$type.gguf
  if [ ! -s "$file" ]; then
    echo "side-by-side: writing $file" >&2
    "$rkv" make-model --shape "$shape" --format gguf --dtype "$type" -o "$file" >&2
  fi
  names+=("$shape-$type")
done

started=$(date -u +%Y-%m-%dT%H:%MZ)
for ((r = 1; r <= rounds; r++)); do
  for name in "${names[@]}"; do
    file=$files/$name.gguf
    echo "side-by-side: round $r/$rounds, $name: llama.cpp" >&2
    "$llama_bench" -m "$file" -t "$threads" -p "$n_prompt" -n 0 -fa "$llama_fa" -r 1 -o json \
      > "$out/$name.llama.pp.$r.json" 2>/dev/null
    llama_depths=$depths
    if [ "$r" -gt "$llama_deep_rounds" ]; then llama_depths=$shallow; fi
    if [ -n "$llama_depths" ]; then
      "$llama_bench" -m "$file" -t "$threads" -p 0 -n "$n_gen" -d "$llama_depths" -fa "$llama_fa" -r 1 -o json \
        > "$out/$name.llama.tg.$r.json" 2>/dev/null
    else  # every depth is above the budget and this round leaves them out
      echo "[]" > "$out/$name.llama.tg.$r.json"
    fi
    echo "side-by-side: round $r/$rounds, $name: rkv" >&2
    "$rkv" bench-decode -m "$file" -t "$threads" -p "$n_prompt" -n "$n_gen" -d "$full_depths" -r "$rkv_reps" \
      --device cpu --json "$out/$name.rkv.$r.json" >/dev/null 2>&1
    case $name in
      *-bf16 | *-f16)
        echo "side-by-side: round $r/$rounds, $name: rkv, llama.cpp precision" >&2
        "$rkv" bench-decode -m "$file" -t "$threads" -p "$n_prompt" -n 0 -r "$rkv_reps" --no-limits \
          --device cpu --matmul-precision llamacpp --json "$out/$name.rounded.$r.json" >/dev/null 2>&1
        ;;
    esac
    if [ -n "$deep" ]; then
      echo "side-by-side: round $r/$rounds, $name: rkv at budget $budget" >&2
      # Depth 0 decoded in turn with the deep ones (--interleave): the budget's speed against its
      # own depth 0 under the same conditions.
      "$rkv" bench-decode -m "$file" -t "$threads" -p 0 -n "$n_gen" -d "0,$deep" -r "$rkv_reps" \
        --no-limits --interleave --device cpu --kv-method rkv --kv-budget "$budget" \
        --kv-buffer 128 --fill "$rkv_fill" --json "$out/$name.budget.$r.json" >/dev/null 2>&1
    fi
  done
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
# The family and model tell apart CPUs whose model name is the same ("AMD EPYC": Zen 4 is
# family 25, Zen 5 family 26).
family=$(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
model=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
[ -n "$family" ] && cpu="$cpu (family $family, model $model)"
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
  grep -xE 'avx2|avx512f|avx512_bf16|avx512_vnni|avx512_fp16|amx_bf16|amx_int8|amx_tile' |
  tr '\n' ' ' | sed 's/ $//')
# rkv's commit: the one its binary reports (bench-decode's build_commit, below); a binary from
# before it reported one gets this checkout's, marked so.
rkv_commit="$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown) (the checkout's)"
python3 - "$out" "$rounds" "$n_prompt" "$n_gen" "$budget" "$cpu" "$isa" "$rkv_commit" \
  "${LLAMA_COMMIT:-}" "$threads" "$started" "$rkv_reps" "$llama_fa" "${names[@]}" <<'EOF'
import json, statistics, sys
(out, rounds, n_prompt, n_gen, budget, cpu, isa, rkv_commit, llama_commit, threads,
 started, rkv_reps, llama_fa), names = sys.argv[1:14], sys.argv[14:]
rounds = int(rounds)

def llama_rows(path):
    """test name -> best tokens/s over the flash-attention settings of one llama-bench run."""
    best, commit = {}, None
    for row in json.load(open(path)):
        commit = row.get("build_commit", commit)
        if row["n_prompt"] > 0:
            key = ("pp%d" % row["n_prompt"], 0)
        else:
            key = ("tg%d" % row["n_gen"], row.get("n_depth", 0))
        best[key] = max(best.get(key, 0.0), row["avg_ts"])
    return best, commit

def rkv_rows(path):
    data = json.load(open(path))
    return {(row["test"], row["depth"] if row["test"].startswith("tg") else 0):
            (row["tokens_per_second"], row.get("fraction_of_limit")) for row in data["results"]}, data

med = statistics.median

def llama_cell(values):
    """llama.cpp's median, with its number of rounds where it ran in fewer (LLAMA_DEEP_ROUNDS)."""
    if not values:
        return "-"
    return "%.1f" % med(values) + ("" if len(values) == rounds else " (%d round%s)" % (
        len(values), "" if len(values) == 1 else "s"))
pct = lambda x: "%.0f%%" % (100 * x) if x is not None else "-"
limits = None
read_limits, compute_limits = [], []  # every rkv row's limit (measured around it)
table = []
notes = []
for name in names:
    ll, rk, bd, rd = [], [], [], []
    for r in range(1, rounds + 1):
        pp, commit = llama_rows(f"{out}/{name}.llama.pp.{r}.json")
        tg, _ = llama_rows(f"{out}/{name}.llama.tg.{r}.json")
        llama_commit = llama_commit or commit
        ll.append({**pp, **tg})
        rows, data = rkv_rows(f"{out}/{name}.rkv.{r}.json")
        limits = limits or data.get("machine_limits")
        for row in data["results"]:
            if "limit" in row:
                (read_limits if "gb_per_s" in row else compute_limits).append(row["limit"])
        rkv_commit = data.get("build_commit", rkv_commit)
        rk.append(rows)
        for extra, runs in (("budget", bd), ("rounded", rd)):
            try:
                runs.append(rkv_rows(f"{out}/{name}.{extra}.{r}.json")[0])
            except FileNotFoundError:
                runs.append({})
    # The budget run's depth 0 (decoded in turn with its deep depths) is its reference, not a
    # row of the table.
    bd0 = [{k: v for k, v in b.items() if k[1] == 0} for b in bd]
    bd = [{k: v for k, v in b.items() if k[1] != 0} for b in bd]
    # rkv's full-cache rows first, then depths only llama.cpp and the budget ran
    # (RKV_FULL_DEPTHS below DEPTHS)
    keys = list(rk[0]) + sorted(k for k in bd[0] if k not in rk[0])
    for key in keys:
        lt = [ll[r][key] for r in range(rounds) if key in ll[r]]  # LLAMA_DEEP_ROUNDS
        budget_t = [bd[r][key][0] for r in range(rounds) if key in bd[r]]
        test = key[0] + ("" if key[0].startswith("pp") else " @ %d" % key[1])
        depth0 = [bd0[r][(key[0], 0)][0] for r in range(rounds) if (key[0], 0) in bd0[r]]
        if budget_t and len(depth0) == len(budget_t):
            notes.append("%s: rkv at R-KV budget %s, %s: %.1f tokens/s, %.0f%% of its depth 0 "
                         "decoded in turn with it (%.1f; the median of the per-round ratios; "
                         "rounds, depth 0 -> %s: %s)" % (
                             name, budget, test, med(budget_t),
                             100 * med([b / a for a, b in zip(depth0, budget_t)]),
                             med(depth0), test,
                             ", ".join("%.1f -> %.1f (%.0f%%)" % (a, b, 100 * b / a)
                                       for a, b in zip(depth0, budget_t))))
        if key not in rk[0]:
            table.append("| %s | %s | %s | - | - | - | - | %.1f |" % (
                name, test, llama_cell(lt), med(budget_t)))
            continue
        rt = [rk[r][key][0] for r in range(rounds)]
        fr = [rk[r][key][1] for r in range(rounds)]
        both = [r for r in range(rounds) if key in ll[r]]  # the rounds llama.cpp ran this test
        ratio = med([rk[r][key][0] / ll[r][key] for r in both]) if both else None
        rf = med(fr) if None not in fr else None
        lf = rf * med(lt) / med(rt) if rf is not None and lt else None
        table.append("| %s | %s | %s | %s | %.1f | %s | %s | %s |" % (
            name, test, llama_cell(lt), pct(lf), med(rt), pct(rf),
            "%.2f" % ratio if ratio is not None else "-",
            "%.1f" % med(budget_t) if budget_t else "-"))
        if key in rd[0]:
            qt = [rd[r][key][0] for r in range(rounds)]
            qf = rf * med(qt) / med(rt) if rf is not None else None
            table.append("| %s | %s, rkv `--matmul-precision llamacpp` | %s | %s | %.1f | %s | %.2f | - |" % (
                name, test, llama_cell(lt), pct(lf), med(qt), pct(qf),
                med([rd[r][key][0] / ll[r][key] for r in both])))
print("rkv beside llama.cpp: %s; ISA: %s; %s threads; rkv %s; llama.cpp %s; %s; %d rounds, medians;"
      " a round's figure: llama.cpp's best of flash attention %s, rkv's best of %s repetition%s."
      % (cpu, isa, threads, rkv_commit, llama_commit or "unknown", started, rounds, llama_fa,
         rkv_reps, "" if rkv_reps == "1" else "s"))
span = lambda v: "%.1f" % v[0] if min(v) == max(v) else "%.1f-%.1f" % (min(v), max(v))
if limits and read_limits:
    print("rkv's limits (%d threads), measured just before and after each of its timed tests: "
          "streaming read %s GB/s; %s %s GFLOP/s." % (
              limits["threads"], span(read_limits), limits["compute"],
              span(compute_limits) if compute_limits else "-"))
print()
print("| file | test | llama.cpp tok/s | of the limit | rkv tok/s | of the limit | rkv / llama.cpp | rkv, R-KV budget %s, tok/s |" % budget)
print("|---|---|---:|---:|---:|---:|---:|---:|")
print("\n".join(table))
if notes:
    print()
    print("\n".join(notes))
EOF
