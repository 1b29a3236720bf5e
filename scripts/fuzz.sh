#!/usr/bin/env bash
# Fuzz one target with libFuzzer (clang, ASan + UBSan + leak checks).
#
#   scripts/fuzz.sh TARGET [RUNS]        e.g. scripts/fuzz.sh jobspec 1000000
#
# A target is test/fuzz/fuzz_TARGET.c plus the sources it needs (the case
# below), seeded from test/fuzz/corpus/TARGET/ and, when present, guided by the
# dictionary test/fuzz/TARGET.dict. New inputs go to build-fuzz/corpus/TARGET/
# (the seeds in the tree are never written). Exits non-zero on a crash, leak,
# timeout (-timeout=5 per input) or build failure; the failing input is left in
# build-fuzz/ (crash-*, leak-*, timeout-*).
# Environment: FUZZ_MAX_TIME (seconds, default 3600) caps the whole run;
# FUZZ_JOBS (default 1) runs that many fuzzing processes in parallel.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/fuzz.sh TARGET [RUNS]   (targets: jobspec rdzv hostlist safetensors)" >&2; exit 2; }
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
target=$1
runs=${2:-1000000}
[[ $runs =~ ^[0-9]+$ ]] || usage

# Sources and pkg-config packages per target. Add a target here.
case $target in
  jobspec)
    srcs=(lib/job/jobspec*.c lib/util/errline.c lib/util/range.c)
    pkgs=(yaml-0.1 libcjson) ;;  # cJSON: model.init_from's config.json
  rdzv)
    srcs=(lib/rdzv/frame.c lib/rdzv/kv_store.c lib/util/errline.c lib/util/grow.c)
    pkgs=(libxxhash) ;;
  hostlist)
    srcs=(lib/launch/hostlist.c lib/util/grow.c)
    pkgs=() ;;
  safetensors)
    srcs=(runtime/ckpt/safetensors.c runtime/ckpt/safetensors_read.c runtime/ckpt/ckpt_place.c)
    pkgs=(libcjson) ;;
  *)
    echo "scripts/fuzz.sh: unknown target '$target'" >&2; usage ;;
esac

harness=test/fuzz/fuzz_$target.c
[ -f "$harness" ] || { echo "scripts/fuzz.sh: $harness is missing" >&2; exit 2; }
command -v clang >/dev/null || { echo "scripts/fuzz.sh: clang not found (make deps)" >&2; exit 2; }

out=build-fuzz
mkdir -p "$out/corpus/$target"
bin=$out/fuzz_$target
# shellcheck disable=SC2046
clang -std=c11 -D_GNU_SOURCE -g -O1 -I. -Wall -Wextra -Wshadow \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
  $( ((${#pkgs[@]})) && pkg-config --cflags "${pkgs[@]}") "$harness" "${srcs[@]}" \
  -o "$bin" $( ((${#pkgs[@]})) && pkg-config --libs "${pkgs[@]}")

seeds=test/fuzz/corpus/$target
dict=test/fuzz/$target.dict
args=(-runs="$runs" -timeout=5 -max_total_time="${FUZZ_MAX_TIME:-3600}" -max_len=4096
      -print_final_stats=1 -artifact_prefix="$out/")
[ -f "$dict" ] && args+=(-dict="$dict")
if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then args+=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS"); fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "fuzz.sh: $target, $runs runs" >&2
"$bin" "${args[@]}" "$out/corpus/$target" "$seeds"
