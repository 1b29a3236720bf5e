#!/usr/bin/env bash
# all_reduce (or OP=all_to_all / all_to_allv) bus bandwidth on one node: dtrun's
# CPU backend (shm) against torch.distributed gloo (Debian's python3-torch), side
# by side, nccl-tests style.
#   busbw = algbw * 2(n-1)/n (all_to_all(v): (n-1)/n), algbw = bytes / time;
#   time = median of ITERS calls. all_to_allv splits each rank's bytes unevenly
#   as a router does, the same split on both sides (comm_bench.c a2a_share).
# Both sides: NPROC processes (default 2), one core's worth each, f32, SIZES
# (default 1M,16M,64M bytes). Rounds alternate dtrun and gloo and keep each
# side's best busbw per size, so a burst of load on this shared machine hurts
# both sides alike; the load average is printed with the results.
#   ROUNDS=3 ITERS=20 NPROC=2 SIZES=1M,16M,64M scripts/bench/comm.sh
#   OP=all_to_allv NPROC=4 scripts/bench/comm.sh
# DTRUN_COMM_TRANSPORT=tcp benchmarks dtrun's TCP ring instead of shm.
#
# MODE=bf16: dtrun alone, fp32 against bf16 buckets instead of against gloo:
# all_reduce of the same number of ELEMENTS (COUNTS, default 256K,4M,16M =
# 1, 16 and 64 MiB of fp32) in both dtypes, on shm and tcp (TRANSPORTS), with
# 2 and 4 ranks (NPROCS) on loopback. Prints per rank the bytes sent (the
# transport's counter, comm_bytes_sent, checked against the algorithm's
# formula by comm_bench), the median time, and the bf16/fp32 ratios of bytes
# (0.5 when bf16 moves as bf16) and of time. Rounds alternate the dtypes; the
# best time of each is kept.
#   MODE=bf16 ROUNDS=3 ITERS=10 COUNTS=256K,4M,16M scripts/bench/comm.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
rounds=${ROUNDS:-3} iters=${ITERS:-20} nproc=${NPROC:-2} sizes=${SIZES:-1M,16M,64M} op=${OP:-all_reduce}

if [ "${MODE:-gloo}" = bf16 ]; then
  make -s build/bench/comm_bench
  tmp=$(mktemp -d /tmp/dtrun-bench-comm.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  counts=${COUNTS:-256K,4M,16M} iters=${ITERS:-10}
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  for tr in ${TRANSPORTS:-shm tcp}; do
    for np in ${NPROCS:-2 4}; do
      for ((round = 1; round <= rounds; round++)); do
        for dt in fp32 bf16; do
          rm -rf "$tmp/store"; mkdir -p "$tmp/store"
          pids=()
          for ((r = 0; r < np; r++)); do
            out=/dev/null; [ "$r" -eq 0 ] && out="$tmp/$tr.$np.$dt.$round"
            DTRUN_COMM_TRANSPORT=$tr RANK=$r WORLD_SIZE=$np DTRUN_STORE="file:$tmp/store" \
              build/bench/comm_bench --op all_reduce --counts "$counts" --iters "$iters" --dtype "$dt" >"$out" &
            pids+=($!)
          done
          for p in "${pids[@]}"; do wait "$p"; done
        done
      done
    done
  done
  load1=$(cut -d' ' -f1-3 /proc/loadavg)
  /usr/bin/python3 - "$tmp" "$rounds" "$load0" "$load1" "$iters" <<'PY'
import glob, os, sys
tmp, rounds, load0, load1, iters = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
best = {}  # (tr, np, count, dt) -> (time_us, sent, formula)
for path in glob.glob(f"{tmp}/*.*.*.*"):
    tr, np_, dt, _ = os.path.basename(path).split(".")
    for line in open(path):
        f = line.split()
        if not f or not f[0].isdigit():
            continue
        count, t, sent, formula = int(f[1]), float(f[3]), int(f[6]), f[7]
        key = (tr, int(np_), count, dt)
        if key not in best or t < best[key][0]:
            best[key] = (t, sent, formula)
print(f"# all_reduce, same element count in fp32 and bf16; median of {iters} calls, best of {rounds} rounds;"
      f" load average {load0} -> {load1} on {os.cpu_count()} cpus")
print(f"# sent = bytes rank 0 put on the wire per call (comm_bytes_sent), formula = tcp 2(n-1)/n count e, shm count e")
print(f"{'transport':>9} {'ranks':>5} {'count':>9} | {'fp32 sent':>10} {'bf16 sent':>10} {'formula ok':>10} {'bytes':>6} |"
      f" {'fp32 us':>9} {'bf16 us':>9} {'time':>6}")
for (tr, np_, count, dt) in sorted(k for k in best if k[3] == "fp32"):
    f32, b16 = best[(tr, np_, count, "fp32")], best.get((tr, np_, count, "bf16"))
    if not b16:
        continue
    ok = "yes" if str(f32[1]) == f32[2] and str(b16[1]) == b16[2] else "NO"
    print(f"{tr:>9} {np_:>5} {count:>9} | {f32[1]:>10} {b16[1]:>10} {ok:>10} {b16[1] / f32[1]:>6.3f} |"
          f" {f32[0]:>9.1f} {b16[0]:>9.1f} {b16[0] / f32[0]:>6.2f}")
PY
  exit 0
fi
DTRUN_EXTRA_DEPS="python3-torch" scripts/deps.sh
make -s build/bench/comm_bench
tmp=$(mktemp -d /tmp/dtrun-bench-comm.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Starts NPROC ranks of a command; rank 0's stdout is the table.
launch() { # out-file env... -- cmd...
  local out=$1; shift
  local pids=() r
  for ((r = 0; r < nproc; r++)); do
    if [ "$r" -eq 0 ]; then
      env RANK=$r WORLD_SIZE="$nproc" "$@" >"$out" &
    else
      env RANK=$r WORLD_SIZE="$nproc" "$@" >/dev/null &
    fi
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
for ((round = 1; round <= rounds; round++)); do
  rm -rf "$tmp/store"; mkdir -p "$tmp/store"
  launch "$tmp/dtrun.$round" DTRUN_STORE="file:$tmp/store" \
    build/bench/comm_bench --op "$op" --sizes "$sizes" --iters "$iters"
  rm -f "$tmp/gloo-init"
  launch "$tmp/gloo.$round" BENCH_INIT="file://$tmp/gloo-init" OMP_NUM_THREADS=1 \
    /usr/bin/python3 scripts/bench/comm_gloo.py --op "$op" --sizes "$sizes" --iters "$iters"
  echo "round $round:"; sed 's/^/  dtrun /' "$tmp/dtrun.$round"; sed 's/^/  gloo  /' "$tmp/gloo.$round"
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

/usr/bin/python3 - "$tmp" "$rounds" "$nproc" "$load0" "$load1" "$op" <<'PY'
import sys
tmp, rounds, nproc, load0, load1, op = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
def best(side):
    rows = {}
    for r in range(1, rounds + 1):
        for line in open(f"{tmp}/{side}.{r}"):
            f = line.split()
            if not f or not f[0].isdigit():
                continue
            size, t, busbw = int(f[0]), float(f[3]), float(f[5])
            if size not in rows or busbw > rows[size][1]:
                rows[size] = (t, busbw)
    return rows
d, g = best("dtrun"), best("gloo")
print(f"\n# {op} f32, {nproc} ranks, best of {rounds} rounds; load average {load0} -> {load1}"
      f" on {open('/proc/cpuinfo').read().count('processor')} cpus")
print(f"{'size(B)':>12} {'dtrun us':>11} {'dtrun busbw':>12} {'gloo us':>11} {'gloo busbw':>11} {'ratio':>7}")
for size in sorted(d):
    dt, db = d[size]
    gt, gb = g.get(size, (float("nan"), float("nan")))
    print(f"{size:>12} {dt:>11.1f} {db:>12.2f} {gt:>11.1f} {gb:>11.2f} {db / gb if gb else float('nan'):>6.2f}x")
PY
