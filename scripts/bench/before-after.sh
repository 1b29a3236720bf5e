#!/usr/bin/env bash
# A change against the tree before it, side by side in one sitting: CPU training
# throughput (the cpu-train.sh model) and shm all-reduce bus bandwidth (the
# comm.sh benchmark), each measured on both builds in interleaved rounds, best
# of each side, printed as after / before. For refactors that must not slow
# anything down.
#   scripts/bench/before-after.sh [REV]     REV: the "before" (default: HEAD~1)
#   ROUNDS=3 SIZES=16M,64M scripts/bench/before-after.sh 12eaccc
# "after" is the working tree as it is (uncommitted changes included).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
rev=${1:-HEAD~1} rounds=${ROUNDS:-3} sizes=${SIZES:-16M,64M} iters=${ITERS:-20}
after=$PWD
tmp=$(mktemp -d /tmp/dtrun-before-after.XXXXXX)
before=$tmp/before
trap 'git -C "$after" worktree remove --force "$before" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach -q "$before" "$rev"
for t in "$before" "$after"; do make -C "$t" -s all build/bench/comm_bench >/dev/null; done

train() { # tree -> median tokens/s over steps 6..30
  (cd "$1" && OMP_NUM_THREADS=2 bin/dtrun scripts/bench/configs/cpu-train.yaml >/dev/null 2>&1)
  python3 - "$1/runs/bench-cpu-train.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print(statistics.median(r["tokens_per_s"] for r in rows[5:]))
PY
}
comm() { # tree -> "size busbw" lines of rank 0 (2 ranks, file store)
  local store=$tmp/store pids=() r
  rm -rf "$store"; mkdir -p "$store"
  for r in 0 1; do
    (cd "$1" && env RANK=$r WORLD_SIZE=2 DTRUN_STORE="file:$store" build/bench/comm_bench \
      --op all_reduce --sizes "$sizes" --iters "$iters" >"$tmp/comm.$r") &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  cat "$tmp/comm.0"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$tmp/rows"
for ((r = 1; r <= rounds; r++)); do
  for side in before after; do
    tree=$before; [ $side = after ] && tree=$after
    echo "train $side $(train "$tree")" >>"$tmp/rows"
    comm "$tree" | sed "s/^/comm $side /" >>"$tmp/rows"
  done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
echo "before: $(git rev-parse --short "$rev")  after: working tree of $(git rev-parse --short HEAD)  rounds: $rounds  load: $load0 -> $load1"
python3 - "$tmp/rows" <<'PY'
import sys
best, col = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "train":
        key, val = ("cpu-train tok/s", f[1]), float(f[2])
    else:  # comm side <comm_bench row>; its header names the busbw column
        if "busbw(GB/s)" in f:
            col[f[1]] = f.index("busbw(GB/s)")
        if not f[2][0].isdigit():
            continue
        key, val = ("all_reduce %s busbw GB/s" % f[2], f[1]), float(f[col[f[1]]])
    best[key] = max(best.get(key, 0.0), val)
for what in sorted({k[0] for k in best}):
    b, a = best[(what, "before")], best[(what, "after")]
    print(f"{what:32s} before {b:10.2f}  after {a:10.2f}  after/before {a / b:.3f}")
PY
