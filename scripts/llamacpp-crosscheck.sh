#!/usr/bin/env bash
# rkv against llama.cpp beyond the shipped goldens (tools/llamacpp-check/crosscheck.py): the
# MoE and hybrid architectures at other shapes, seeds and prompt lengths, and rkv make-model's
# files in every weight type. llama.cpp is fetched and built by whoever runs this, never
# vendored: LLAMA_DIR is its source tree, built with CMake into LLAMA_DIR/build (its libllama).
#
#   scripts/llamacpp-crosscheck.sh LLAMA_DIR [--quick]
#
# Needs build/rkv, g++, and Debian's python3 with numpy (/usr/bin/python3); gguf-py comes from
# LLAMA_DIR/gguf-py. Prints a markdown table; exits 1 if a float32 file misses the goldens' bar.
set -euo pipefail
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit $([[ $# -lt 1 ]] && echo 2 || echo 0)
fi
LLAMA_DIR=$(cd "$1" && pwd)
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RKV="$ROOT/build/rkv"
[[ -x "$RKV" ]] || { echo "no $RKV: build rkv first (README)" >&2; exit 2; }
LIBS="$LLAMA_DIR/build/bin"
[[ -e "$LIBS/libllama.so" ]] || { echo "no $LIBS/libllama.so: build llama.cpp first" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
g++ -O2 -std=c++17 -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" \
  "$ROOT/tools/llamacpp-check/dump_llamacpp.cpp" -L"$LIBS" -lllama -lggml -lggml-base \
  -Wl,-rpath,"$LIBS" -o "$WORK/dump"
g++ -O2 -std=c++17 -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" \
  "$ROOT/tools/llamacpp-check/tokenize_llamacpp.cpp" -L"$LIBS" -lllama -lggml -lggml-base \
  -Wl,-rpath,"$LIBS" -o "$WORK/tokenize"
echo "rkv $(git -C "$ROOT" rev-parse --short HEAD) beside llama.cpp $(git -C "$LLAMA_DIR" rev-parse --short HEAD 2>/dev/null || echo '?');" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(date -u +%Y-%m-%dT%H:%MZ)"
echo
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$LLAMA_DIR/gguf-py:$ROOT/tools/llamacpp-check" /usr/bin/python3 \
  "$ROOT/tools/llamacpp-check/crosscheck.py" "$RKV" "$WORK/dump" "$WORK" "$@"
