#!/usr/bin/env bash
# The include arrows of DESIGN.md hold (scripts/check-includes.py), and the
# check does fail when one goes the wrong way: upward, sideways (a cycle between
# two folders of one level), or into a kernel backend's own header.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/check-includes.py

tmp=$(mktemp -d /tmp/dtrun-arrows.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
expect_bad() { # what file include message
  rm -rf "$tmp/t"; mkdir -p "$tmp/t"; cp -r cmd lib runtime kernels "$tmp/t/"
  printf '#include "%s"\n' "$3" >>"$tmp/t/$2"
  if scripts/check-includes.py --root "$tmp/t" >"$tmp/out" 2>&1; then
    echo "FAIL: $1: the check passed"; exit 1
  fi
  grep -q -- "$4" "$tmp/out" || { echo "FAIL: $1: no line '$4' in:"; cat "$tmp/out"; exit 1; }
  echo "ok - $1 is refused"
}
expect_bad "model includes comm" runtime/model/block.c runtime/comm/comm.h \
  "runtime/model may not include runtime/comm (an arrow sideways"
expect_bad "lib includes runtime" lib/job/jobspec.c runtime/model/model.h \
  "lib/job may not include runtime/model (an arrow upward"
expect_bad "parallel includes the worker" runtime/parallel/ddp.c runtime/worker/engine.h \
  "runtime/parallel may not include runtime/worker (an arrow upward"
expect_bad "kernels include the runtime" kernels/cpu/gemm.c runtime/rng.h \
  "kernels may not include runtime"
expect_bad "comm includes a CUDA backend header" runtime/comm/comm.c kernels/cuda/ops_cuda.h \
  "only kernels/ may include a backend's own header"
expect_bad "a missing header" runtime/data/data.c runtime/data/nope.h "does not exist"
