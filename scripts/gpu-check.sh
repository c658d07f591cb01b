#!/usr/bin/env bash
# The CUDA backend's checks (docs/GPU.md), split so that each part fits one command on the lent GPU
# machine (10 minutes a command, no compiler there for rkv's dependencies):
#
#   scripts/gpu-check.sh build    here: builds rkv with CUDA (sm_90) into build-gpu/ and gathers
#                                 what the GPU machine needs into gpu-bin/ (git-ignored): the two
#                                 binaries, the shared libraries it lacks (utf8proc, pcre2),
#                                 the golden checkpoints
#   scripts/gpu-check.sh test     there: the gpu-labelled tests (parity with the goldens and the CPU
#                                 engine, kernels against float64), then a short decode benchmark
#   scripts/gpu-check.sh all      there: test, then bench, writing the 8B checkpoint during the
#                                 tests (RKV_GPU_TABLE1=0 skips the 16K steady-state row)
#   scripts/gpu-check.sh bench    there: bench-decode at batch 1 on the Llama3-8B shape (random bf16
#                                 weights) against the card's copy bandwidth, rkv bench at batch 1
#                                 and 64 (prompt 128, 512 generated), and transformers' generate on
#                                 the same checkpoint and settings, back to back; then R-KV Table
#                                 1's FullKV row at 16K in a steady state
#   scripts/gpu-check.sh tune     there: the decode path with and without its vector norms and
#                                 the GEMV's dependent launch (RKV_CUDA_VECTOR_NORM, RKV_CUDA_PDL):
#                                 the kernel and golden tests with both off (test covers both on),
#                                 then bench-decode on the 8B shape under all four, alternating
#   scripts/gpu-check.sh profile  there: each kernel's duration over a prefill and a few decode
#                                 steps on the 8B shape (ncu, one metric) into ncu.csv
#
# On the device tool: run(command="scripts/gpu-check.sh test", carry=["gpu-bin"]). Logs and JSON go
# to $OUT when it is set (the device tool brings them back), else to gpu-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:-}
out=${OUT:-gpu-out}
mkdir -p "$out"

case "$stage" in
  build)
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DRKV_CUDA=on \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DRKV_BUILD_BENCH=OFF >/dev/null
    ninja -C build-gpu rkv rkv_gpu_tests
    rm -rf gpu-bin && mkdir -p gpu-bin/shared/golden
    cp build-gpu/rkv build-gpu/rkv_gpu_tests gpu-bin/
    # The shared libraries the GPU machine may lack (it has CUDA, glibc, libstdc++, OpenSSL,
    # zlib): every library the binaries link from Debian's multiarch folder other than those.
    ldd build-gpu/rkv build-gpu/rkv_gpu_tests | awk '$3 ~ /^\/lib\/x86_64-linux-gnu\// {print $3}' |
      grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libssl|libcrypto|libz)\.so' |
      sort -u | while read -r lib; do cp "$lib" gpu-bin/; done
    cp -r ../shared/golden/models gpu-bin/shared/golden/
    mkdir -p gpu-bin/shared/golden/gguf
    cp ../shared/golden/gguf/stories260K-q8_0.gguf gpu-bin/shared/golden/gguf/
    du -sh gpu-bin
    ;;
  test)
    export LD_LIBRARY_PATH=$PWD/gpu-bin:${LD_LIBRARY_PATH:-}
    export RKV_SHARED_DIR=$PWD/gpu-bin/shared RKV_SOURCE_DIR=$PWD
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
    # A shared library the machine lacks shows here first (carry it in gpu-bin/ like libutf8proc).
    if ldd gpu-bin/rkv gpu-bin/rkv_gpu_tests | grep "not found"; then exit 1; fi
    set -o pipefail
    gpu-bin/rkv_gpu_tests 2>&1 | tee "$out/gpu-tests.log" | grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|PASSED|FAILED|equal on"
    for shape in qwen2.5-0.5b; do
      gpu-bin/rkv make-model --shape $shape --dtype bf16 -o /tmp/rkv-$shape >/dev/null
      gpu-bin/rkv bench-decode -m /tmp/rkv-$shape --device cuda -d 0,4096 -p 512 -n 128 \
        --json "$out/bench-decode-$shape.json" | tee "$out/bench-decode-$shape.md"
    done
    ;;
  all)
    # test and bench in one command (each start of the GPU machine costs minutes of a short
    # lease): the 8B checkpoint is written on the CPUs while the tests run on the GPU.
    export LD_LIBRARY_PATH=$PWD/gpu-bin:${LD_LIBRARY_PATH:-}
    model=/tmp/rkv-r1-distill-llama-8b
    (gpu-bin/rkv make-model --shape r1-distill-llama-8b --dtype bf16 -o $model.tmp \
      >"$out/make-model-8b.log" 2>&1 && mv $model.tmp $model) &
    "$0" test || echo "gpu-check: the tests failed; the benchmarks run anyway"
    wait
    "$0" bench
    ;;
  bench)
    export LD_LIBRARY_PATH=$PWD/gpu-bin:${LD_LIBRARY_PATH:-}
    model=/tmp/rkv-r1-distill-llama-8b
    [ -d $model ] || gpu-bin/rkv make-model --shape r1-distill-llama-8b --dtype bf16 -o $model
    gpu-bin/rkv bench-decode -m $model --device cuda -d 0,4096 -p 512 -n 128 \
      --json "$out/bench-decode-8b.json" | tee "$out/bench-decode-8b.md"
    gpu-bin/rkv bench -m $model --device cuda --prompt-len 128 --gen-lens 512 --methods fullkv \
      --batch 1,64 --kv-memory 40GiB --kv-dtype bf16 --json "$out/bench-8b.json" \
      | tee "$out/bench-8b.md"
    python3 tools/gpu/hf_generate.py $model --batch 1 64 --prompt-len 128 --gen-len 512 --json \
      | tee "$out/hf-8b.log"
    [ "${RKV_GPU_TABLE1:-1}" = 1 ] || exit 0
    # R-KV Table 1's FullKV row at 16K generated tokens, as many sequences as fit, in a steady state
    # (a whole run outlasts a command; docs/PERFORMANCE-LOG.md, "Steady state").
    gpu-bin/rkv bench -m $model --device cuda --prompt-len 128 --gen-lens 16384 --methods fullkv \
      --batch 1,max --kv-dtype bf16 --steady-state 200 --json "$out/table1-fullkv-16k.json" \
      | tee "$out/table1-fullkv-16k.md"
    ;;
  tune)
    # The decode-path changes against their measuring knobs (docs/GPU.md): the norms' vector
    # kernel with the residual add in its launch (RKV_CUDA_VECTOR_NORM) and the GEMV's
    # programmatic dependent launch (RKV_CUDA_PDL), on the 8B shape, in alternating rounds.
    export LD_LIBRARY_PATH=$PWD/gpu-bin:${LD_LIBRARY_PATH:-}
    export RKV_SHARED_DIR=$PWD/gpu-bin/shared RKV_SOURCE_DIR=$PWD
    model=/tmp/rkv-r1-distill-llama-8b
    [ -d $model ] || gpu-bin/rkv make-model --shape r1-distill-llama-8b --dtype bf16 -o $model \
      >"$out/make-model-8b.log" 2>&1
    configs="00 10 01 11"  # RKV_CUDA_VECTOR_NORM, RKV_CUDA_PDL
    # the test run (scripts/gpu-check.sh test) covers both on; here the kernels with both off
    echo "norm 0 pdl 0: $(RKV_CUDA_VECTOR_NORM=0 RKV_CUDA_PDL=0 gpu-bin/rkv_gpu_tests \
      --gtest_filter='GpuKernels.*:Checkpoints/*' 2>&1 | grep -E '^\[  (PASSED|FAILED) ')"
    for round in 1 2; do
      for c in $configs; do
        limits=--no-limits
        [ "$round$c" = 100 ] && limits=  # the card's limits once, in the first measurement
        f="$out/tune-$c-r$round"
        RKV_CUDA_VECTOR_NORM=${c:0:1} RKV_CUDA_PDL=${c:1:1} gpu-bin/rkv bench-decode -m $model \
          --device cuda -d 0 -p 128 -n 128 $limits --json "$f.json" >"$f.md" 2>&1
        echo "round $round, norm ${c:0:1} pdl ${c:1:1}: $(grep -E 'GPU limits|tg128' "$f.md")"
      done
    done
    ;;
  profile)
    export LD_LIBRARY_PATH=$PWD/gpu-bin:${LD_LIBRARY_PATH:-}
    model=/tmp/rkv-r1-distill-llama-8b
    [ -d $model ] || gpu-bin/rkv make-model --shape r1-distill-llama-8b --dtype bf16 -o $model \
      >"$out/make-model-8b.log" 2>&1
    # -p 8: the prompt takes the GEMV path too, so 1,200 launches hold the prompt and two steps
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      --launch-count 1200 gpu-bin/rkv bench-decode -m $model --device cuda -d 0 -p 8 -n 4 -r 1 \
      --no-limits >"$out/ncu.csv" 2>"$out/ncu.log" || tail -5 "$out/ncu.log"
    python3 tools/gpu/ncu_summary.py "$out/ncu.csv"
    ;;
  *)
    echo "usage: scripts/gpu-check.sh build|test|bench|all|tune|profile (see the comment at the top)" >&2
    exit 2
    ;;
esac
