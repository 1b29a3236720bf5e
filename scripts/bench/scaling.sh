#!/usr/bin/env bash
# Throughput and memory per rank of each parallel strategy on this machine
# (issue 5): a small GPT (L=4, C=128, H=4, V=256, T=128, fp32, AdamW, synthetic
# tokens) at one global batch of 16 sequences, on 1 rank and on 2 ranks under
# DDP, ZeRO-1, ZeRO-2, FSDP, tensor parallel (tp 2, without and with sequence
# parallelism) and a 1F1B pipeline (pp 2, 8
# micro-batches). One OpenMP thread per worker, so 2 ranks use 2 cores.
#
# Per layout: the median tokens/s over steps 5..STEPS (rank 0's metrics: the
# global batch's tokens over the step's wall time), the speedup over 1 rank, and
# per rank the peak bytes the worker accounted (account.h: params, grads,
# optimizer, activations, buffers at the worst moment) and its peak RSS
# (getrusage; includes the binary, OpenBLAS and the allocator's slack).
# The machine may be busy: the load average is printed before and after, and
# each run measures the CPU other processes took meanwhile (test/parallel/
# cpu_share.py). Each layout runs until ROUNDS (default 2) runs had the cores to
# themselves (others took < 0.15 of a core), at most TRIES (default 8) times;
# the best clean run is kept, or, when none was clean, the best run, marked.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OMP_NUM_THREADS=1
steps=${STEPS:-30}
rounds=${ROUNDS:-2}
tries=${TRIES:-8}
make -s all
T=$(mktemp -d /tmp/dtrun-scaling.XXXXXX)
trap 'rm -rf "$T"' EXIT

# job NAME dp tp pp mode micro_batch [microbatches [sequence_parallel]]
job() {
  local name=$1 dp=$2 tp=$3 pp=$4 mode=$5 mb=$6 m=${7:-1} sp=${8:-false}
  cat >"$T/$name.yaml" <<EOF
model: {kind: gpt, n_layer: 4, n_head: 4, d_model: 128, vocab_size: 256, seq_len: 128}
data: {kind: synthetic, synthetic_size: 1000000}
train: {steps: $steps, global_batch: 16, micro_batch: $mb, lr: 1.0e-3, grad_clip: 1.0, threads: 1, eval_batches: 1}
log: {progress: off, metrics: $T/$name.jsonl}
parallel: {dp: $dp, tp: $tp, pp: $pp, mode: $mode, sequence_parallel: $sp$( [ "$pp" -gt 1 ] && echo ", pp_schedule: 1f1b, microbatches: $m")}
EOF
}
job 1rank      1 1 1 none  8
job dp2-ddp    2 1 1 none  8
job dp2-zero1  2 1 1 zero1 8
job dp2-zero2  2 1 1 zero2 8
job dp2-fsdp   2 1 1 fsdp  8
job tp2        1 2 1 none  8
job tp2-sp     1 2 1 none  8 1 true
job pp2-1f1b   1 1 2 none  2 8
LAYOUTS="1rank dp2-ddp dp2-zero1 dp2-zero2 dp2-fsdp tp2 tp2-sp pp2-1f1b"

echo "machine: $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for name in $LAYOUTS; do
  clean=0
  for r in $(seq "$tries"); do
    world=$(python3 -c "import re,sys; t=open(sys.argv[1]).read(); print(eval('*'.join(re.search(r'%s: (\d+)' % k, t).group(1) for k in ('dp','tp','pp'))))" "$T/$name.yaml")
    rm -f "$T/$name".*jsonl
    python3 test/parallel/cpu_share.py "$T/$name.cpu.json" -- \
      bin/dtrun --nproc-per-node="$world" "$T/$name.yaml" >"$T/$name.log" 2>&1 ||
      { tail -n 20 "$T/$name.log"; echo "scaling: $name failed" >&2; exit 1; }
    python3 - "$T" "$name" "$r" >>"$T/rounds.jsonl" <<'PY'
import glob, json, statistics, sys
d, name, rnd = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if '"tokens_per_s"' in l]
tps = statistics.median(r["tokens_per_s"] for r in rows[4:])
ranks = []
for f in sorted(glob.glob(f"{d}/{name}.rank*.jsonl")):
    last = [json.loads(l) for l in open(f) if l.strip()][-1]
    ranks.append({"rank": last["rank"], "layout": last["layout"], "mem": last["mem_peak"]["total"],
                  "rss": last["rss_peak"]})
cpu = json.load(open(f"{d}/{name}.cpu.json"))
print(json.dumps({"name": name, "round": rnd, "tokens_per_s": tps, "ranks": ranks,
                  "foreign": cpu["foreign_share"]}))
PY
    tail -n 1 "$T/rounds.jsonl" | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["foreign"] >= 0.15)' &&
      clean=$((clean + 1))
    [ "$clean" -ge "$rounds" ] && break
  done
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$T/rounds.jsonl" "$LAYOUTS" "$steps" "$rounds" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
order, steps, rounds = sys.argv[2].split(), sys.argv[3], sys.argv[4]  # rounds: clean runs wanted
best = {}
for r in runs:  # the best clean run (others took < 0.15 of a core), else the best run
    key = (r["foreign"] < 0.15, r["tokens_per_s"])
    b = best.get(r["name"])
    if b is None or key > (b["foreign"] < 0.15, b["tokens_per_s"]):
        best[r["name"]] = r
base = best["1rank"]["tokens_per_s"]
print(f"\nGPT L4 C128 H4 V256 T128, global batch 16 x 128 tokens, fp32, 1 thread per rank; "
      f"median tokens/s of steps 5..{steps}, best of up to {rounds} runs that had the cores")
print(f"{'layout':<12} {'ranks':>5} {'tokens/s':>10} {'speedup':>8}  {'accounted peak MiB per rank':<28} "
      f"{'RSS peak MiB per rank':<22} {'others took':>11}")
for name in order:
    b = best[name]
    mem = " / ".join(f"{x['mem'] / 2**20:.1f}" for x in b["ranks"])
    rss = " / ".join(f"{x['rss'] / 2**20:.0f}" for x in b["ranks"])
    print(f"{name:<12} {len(b['ranks']):>5} {b['tokens_per_s']:>10.0f} {b['tokens_per_s'] / base:>7.2f}x  "
          f"{mem:<28} {rss:<22} {b['foreign']:>6.2f} core{'' if b['foreign'] < 0.15 else '  (busy: not clean)'}")
PY
