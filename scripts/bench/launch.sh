#!/usr/bin/env bash
# Launcher wall time, start to exit, for N = 2 and 8 local workers that meet at a
# barrier: dtrun against torchrun --standalone, side by side, interleaved rounds,
# best of each (fair under noise).
#   dtrun+kv     dtrun, workers = test/helpers/kv_barrier (C, dtrun's KV store)
#   dtrun+gloo   dtrun, workers = a PyTorch script: env:// + gloo barrier
#   torchrun     torchrun --standalone, the same PyTorch script
# The ratio torchrun / dtrun+gloo compares launchers on the same workers; dtrun+kv
# is what a job pays for dtrun's launch and rendezvous alone.
# torchrun is Debian's python3-torch (1.13) run by /usr/bin/python3; its log
# option parser crashes on Python 3.11 unless given -r/-t and --log_dir, so it
# runs with -r 1 -t 1 --log_dir (both launchers then tee stdout the same way).
#   ROUNDS=3 NS="2 8" scripts/bench/launch.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
ns=${NS:-2 8}
PY=/usr/bin/python3
DTRUN_EXTRA_DEPS="python3-torch" scripts/deps.sh
make -s all
T=$(mktemp -d /tmp/dtrun-bench-launch.XXXXXX)
trap 'rm -rf "$T"' EXIT
gcc -std=c11 -D_GNU_SOURCE -O2 -I. test/helpers/kv_barrier.c build/libdtrun.a \
    $(pkg-config --libs yaml-0.1 libuv openblas zlib libxxhash libcjson) -fopenmp -lm -o "$T/kv_barrier"
script=scripts/bench/launch_gloo_barrier.py

# seconds CMD...: wall time of one run (fails the bench if the run fails).
seconds() {
  local s e
  s=$(date +%s%N)
  "$@" >"$T/run.log" 2>&1 || { cat "$T/run.log"; echo "bench: failed: $*" >&2; exit 1; }
  e=$(date +%s%N)
  awk -v d=$((e - s)) 'BEGIN { printf "%.3f", d / 1e9 }'
}
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; }

for n in $ns; do
  best_kv=999 best_dg=999 best_tr=999
  for r in $(seq "$rounds"); do
    kv=$(seconds bin/dtrun --nproc-per-node="$n" -- "$T/kv_barrier" bench 60)
    dg=$(seconds bin/dtrun --nproc-per-node="$n" -- "$PY" "$script")
    rm -rf "$T/tlogs"
    tr=$(seconds "$PY" -m torch.distributed.run --standalone --nproc_per_node="$n" \
           -r 1 -t 1 --log_dir "$T/tlogs" "$script")
    printf 'N=%d round %d: dtrun+kv %6.3f s | dtrun+gloo %6.3f s | torchrun %6.3f s\n' "$n" "$r" "$kv" "$dg" "$tr"
    best_kv=$(min "$best_kv" "$kv"); best_dg=$(min "$best_dg" "$dg"); best_tr=$(min "$best_tr" "$tr")
  done
  printf 'launch N=%d (best of %d): dtrun+kv %.3f s | dtrun+gloo %.3f s | torchrun %.3f s | torchrun/dtrun (same workers) %.2fx\n' \
    "$n" "$rounds" "$best_kv" "$best_dg" "$best_tr" "$(awk -v a="$best_tr" -v b="$best_dg" 'BEGIN { print a / b }')"
done
