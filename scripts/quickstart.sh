#!/usr/bin/env bash
# The main job on a fresh machine: installs the build dependencies, builds rkv (build/rkv), and
# generates with R-KV compression on the model the repository ships: rkv-tiny-reasoner
# (models/rkv-tiny-reasoner, trained by tools/tiny/train.py). The prompt is a held-out problem
# (data/chains_test.jsonl): a program of digit assignments modulo 10 and a question; the model
# writes a chain of thought of about 500 tokens, re-checking itself, and a boxed answer, while
# R-KV keeps its KV cache at 64 + 16 entries per head.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target rkv
model=models/rkv-tiny-reasoner
problem=$'j=3;z=0;P=8;d=2;e=P-j;I=e-3;g=j+e;x=I+4;L=x-8;W=x-P;G=d+9;n=x-5;c=W+g;f=P-x;B=g+2;A=c-I;V=A-P;p=L-2;M=z-8;R=W-6;Q=j-R;K=d-W;s=e+A;F=P+p;h=L+9;u=L-7;E=x+e;D=x+E;b=M+j;y=e-6;w=e+D;m=h-c;S=g-1\n? x+e\n'
echo "prompt (held-out problem chain-7-0, answer 1):"
printf '%s' "$problem"
echo "---"
./build/rkv generate -m "$model" -p "$problem" -n 1024 --temp 0 \
  --kv-method rkv --kv-budget 64 --kv-buffer 16 --kv-window 8
