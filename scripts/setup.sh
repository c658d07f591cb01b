#!/usr/bin/env bash
# Installs what rkv needs to build and test (Debian bookworm): the Debian packages, and the npm
# packages of the server's client tests (pinned by tests/server/package-lock.json).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcli11-dev libfmt-dev libcpp-httplib-dev
  libgtest-dev libbenchmark-dev clang-format
  clang libclang-rt-14-dev llvm
  haproxy prometheus python3 python3-yaml python3-numpy python3-regex python3-jinja2
  python3-torch libopenblas0-pthread
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The server's client tests run on node with npm packages (tests/server/package-lock.json);
# Debian's nodejs and npm serve when the machine has no node of its own.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# The viz page's browser test (tests/browser) drives Debian's headless chromium.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all build dependencies are installed"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
cd "$(dirname "$0")/.."
# npm packages of the node tests, each pinned by its package-lock.json: the server's clients
# (the official openai SDK) and the viz page's browser driver (puppeteer-core; no browser download).
for dir in tests/server tests/browser; do
  stamp=$dir/node_modules/.installed-from-package-lock.json
  if ! cmp -s $dir/package-lock.json "$stamp"; then
    echo "setup: installing $dir's npm packages ($dir/package-lock.json)"
    PUPPETEER_SKIP_DOWNLOAD=1 npm ci --prefix $dir --no-audit --no-fund --loglevel=error
    cp $dir/package-lock.json "$stamp"
  fi
done
