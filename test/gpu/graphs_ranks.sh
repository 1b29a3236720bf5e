#!/usr/bin/env bash
# train.cuda_graphs on several processes on the GPU (runtime/worker/
# engine_graph.c, runtime/comm/comm_nccl.c: NCCL's collectives recorded into
# the step's graphs and replayed). NOT RUN YET: no machine with a GPU has been
# lent since it was written, and its second part needs two GPUs.
#
# 1. Any GPU machine: two ranks sharing GPU 0 talk over shm (NCCL refuses two
#    ranks on one GPU), which a graph cannot record: the run is refused at
#    set-up with exit 2 and a line that names shm, NCCL and the key.
# 2. Two GPUs or more (skipped, with a line saying so, on one): a small GPT
#    (test/parallel/gpt-cuda.yaml) on 2 ranks over NCCL, graphs on against
#    off, for DDP (2 micro-batches accumulated), ZeRO-1, ZeRO-2, FSDP and
#    tp 2 with sequence parallelism; evaluation every 5 steps (every rank
#    records its graphs again after it), clipping active. The runs must say
#    "comm nccl"; every step's loss and gradient norm and every validation
#    loss must agree within GRAPHS_RTOL (default 0: bit for bit), and the
#    parameters within GRAPHS_ATOL (default 0). Why bit for bit is expected:
#    the replayed step runs the same kernels and the same NCCL collectives on
#    the same buffers in the same order as the issued one. Should NCCL pick
#    another algorithm or protocol for a recorded collective than for an
#    issued one, the sums would differ in their last bits: rerun with
#    GRAPHS_RTOL=1e-5 GRAPHS_ATOL=1e-4 to tell that from a wrong step.
#    The mean step time of both runs is printed, not checked.
# Run by test/gpu/run.sh (make test-gpu); prints "ok - " / "not ok - " lines.
source "$(dirname "$0")/../parallel/lib.bash"
RTOL=${GRAPHS_RTOL:-0}
ATOL=${GRAPHS_ATOL:-0}

# job NAME LAYOUT on|off
job() {
  local f=$T/$1.yaml
  layout_job gpt-cuda "$2" "$f" "$T/$1.jsonl"
  sed -i -e "s/^  global_batch: .*/&\n  eval_every: 5/" "$f"
  [ "$3" = on ] && sed -i -e "s/^  global_batch: .*/&\n  cuda_graphs: true/" "$f"
  return 0
}

# 1. two ranks on one GPU: the CPU transport, refused
job share "dp=2" on
CUDA_VISIBLE_DEVICES=0 timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/share.yaml" >"$T/share.log" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q 'talk over shm, the CPU transport' "$T/share.log" && grep -q 'NCCL' "$T/share.log" &&
   grep -q 'train.cuda_graphs: false' "$T/share.log"; then
  echo "ok - graphs_ranks: 2 ranks on one GPU (shm) refused at set-up, exit 2: $(grep -m1 'CPU transport' "$T/share.log")"
else
  echo "not ok - graphs_ranks: 2 ranks on one GPU: exit $rc, want 2 and the CPU transport's line:"
  tail -n 5 "$T/share.log" | sed 's/^/#   /'
  FAILS=$((FAILS + 1))
fi

# 2. two GPUs over NCCL
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$ngpu" -lt 2 ]; then
  echo "# graphs_ranks: $ngpu GPU: the NCCL runs need two (skipped)"
  [ "$FAILS" -eq 0 ]
  exit
fi
export CUDA_VISIBLE_DEVICES=0,1
for lay in "dp=2 accum=2" "dp=2 mode=zero1" "dp=2 mode=zero2" "dp=2 mode=fsdp" "tp=2 sp=1"; do
  name=g-$(layout_name "$lay")
  out=""
  ok=1
  for g in off on; do
    job "$name-$g" "$lay" $g
    DTRUN_DUMP_PARAMS=$T/$name-$g.bin timeout -k 5 300 "$DTRUN" --nproc-per-node=2 "$T/$name-$g.yaml" \
      >"$T/$name-$g.log" 2>&1 || { ok=0; tail -n 5 "$T/$name-$g.log" | sed 's/^/#   /'; }
    grep -q 'comm nccl' "$T/$name-$g.log" || { ok=0; echo "# [$lay] $g: the run did not say 'comm nccl'"; }
  done
  if [ $ok = 1 ] && out=$(python3 - "$T/$name-off.jsonl" "$T/$name-on.jsonl" "$RTOL" <<'EOF_PY' 2>&1
import json, sys
rows = [[json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3]]
rtol = float(sys.argv[3])
keys = ("loss", "grad_norm", "val_loss")
pick = lambda rs: {(r["step"], k): r[k] for r in rs for k in keys if k in r}
a, b = pick(rows[0]), pick(rows[1])
if sorted(a) != sorted(b):
    sys.exit("the records differ in their steps")
worst = max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-30) for k in a)
t = lambda rs: [r["elapsed"] for r in rs if "elapsed" in r and "loss" in r]
sa, sb = t(rows[0]), t(rows[1])
mean = lambda e: (e[-1] - e[2]) / (len(e) - 3) if len(e) > 3 else float("nan")
print(f"worst relative difference {worst:.3g}; mean step {mean(sa) * 1e3:.2f} ms off, {mean(sb) * 1e3:.2f} ms on")
sys.exit(0 if worst <= rtol else 1)
EOF_PY
  ) && python3 "$ROOT/test/parallel/compare.py" "$T/$name-off.jsonl" "$T/$name-off.bin" "$T/$name-on.jsonl" \
       "$T/$name-on.bin" "$RTOL" "$ATOL" >"$T/$name.cmp" 2>&1; then
    echo "ok - graphs_ranks: [$lay] on 2 GPUs over NCCL, graphs on = off: $out; $(tail -n 1 "$T/$name.cmp")"
  else
    echo "not ok - graphs_ranks: [$lay] on 2 GPUs over NCCL: ${out:-did not train}"
    [ -f "$T/$name.cmp" ] && sed 's/^/#   /' "$T/$name.cmp"
    FAILS=$((FAILS + 1))
  fi
done
[ "$FAILS" -eq 0 ]
