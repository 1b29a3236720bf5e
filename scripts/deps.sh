#!/usr/bin/env bash
# Install the Debian packages dtrun needs to build and test, when missing.
# Runtime/build: libyaml, libuv, OpenBLAS, zlib, xxhash, cJSON, Random123 (header-only),
# libpng (dtrun classify reads PNG images), PCRE2 (the tokenizer's pre-tokenizer
# regexes, with its JIT) and utf8proc (a tokenizer.json's NFC/NFKC normalizer).
# Tests: Fashion-MNIST and fortunes (real data), clang + its runtime (libFuzzer),
# iproute2 (netns), python3 (the tests' comparison scripts), slurm-wlm + munge (the
# Slurm test), chromium (test-only: test/integration/plot.sh renders the SVG of
# `dtrun plot` headless and checks the screenshot). Peers (python3-torch) are installed by the bench scripts and by the
# export test that loads a checkpoint into PyTorch, never here.
set -euo pipefail
pkgs=(gcc make pkg-config libyaml-dev libuv1-dev libopenblas-dev zlib1g-dev libxxhash-dev
      libcjson-dev librandom123-dev libpng-dev libpcre2-dev libutf8proc-dev dataset-fashion-mnist fortunes clang libclang-rt-14-dev
      iproute2 procps python3 slurm-wlm munge chromium)
pkgs+=(${DTRUN_EXTRA_DEPS:-})
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "dtrun: missing Debian packages: ${missing[*]}" >&2
  echo "dtrun: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "dtrun: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
  apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}"; }
