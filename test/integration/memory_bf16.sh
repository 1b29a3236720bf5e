#!/usr/bin/env bash
# Memory of a bf16 run against the dry-run and the OS (issue 13): a 25M-
# parameter GPT (8 layers, d 512, byte vocabulary, T 256, batch 4) trained for
# 3 steps on one process in bf16 mixed precision, and in fp32 for comparison.
#  - the dry-run's prediction (--hardware cpu, --format json) equals the
#    runtime's own accounting (account.h: the rank's metrics file), category
#    by category and in total, to the byte;
#  - the OS's peak RSS (getrusage, in the same record) is within 5 % of the
#    dry-run's total, which adds what the backend keeps outside the
#    accounting (the "fixed" bytes: on the CPU under bf16 the kernels' fp32
#    staging of bf16 operands, kernels/cpu/act.c): the rest is the program,
#    its libraries and OpenBLAS's buffers.
set -u
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/dtrun-memory-bf16.XXXXXX); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for prec in bf16 fp32; do
  cat >"$T/$prec.yaml" <<YAML
model:
  kind: gpt
  n_layer: 8
  n_head: 8
  d_model: 512
  vocab_size: 256
  seq_len: 256
data:
  kind: synthetic
train:
  steps: 3
  global_batch: 4
  micro_batch: 4
  precision: $prec
  threads: 1
  eval_batches: 1
  seed: 7
log:
  progress: off
  metrics: $T/$prec.jsonl
YAML
  timeout -k 5 300 bin/dtrun "$T/$prec.yaml" >"$T/$prec.log" 2>&1 || { tail -n 20 "$T/$prec.log"; fail "$prec run failed"; }
  bin/dtrun --dry-run --hardware cpu --format=json "$T/$prec.yaml" >"$T/$prec.dry.json" 2>"$T/$prec.dry.err" ||
    { cat "$T/$prec.dry.err"; fail "$prec dry-run failed"; }
done
python3 - "$T" <<'PY'
import json, sys
T = sys.argv[1]
ok = True
# dry-run categories -> the runtime's (account.h) names
pairs = {"params": ["params"], "master": ["master"], "grads": ["grads"], "optimizer": ["optimizer"],
         "activations": ["activations", "logits", "workspace"], "buffers": ["comm"]}
for prec in ("bf16", "fp32"):
    run = [json.loads(l) for l in open(f"{T}/{prec}.rank0.jsonl") if l.strip()][-1]
    acct, rss = run["mem_peak"], run["rss_peak"]
    dry = json.load(open(f"{T}/{prec}.dry.json"))["stages"][0]["memory"]
    n = dry["params"] // (2 if prec == "bf16" else 4)
    for a, ds in pairs.items():
        d = sum(dry[k] for k in ds)
        good = d == acct[a]
        ok &= good
        if not good:
            print(f"FAIL {prec} {a}: dry-run {d} ({'+'.join(ds)}) vs accounted {acct[a]}")
    good = dry["allocated"] == acct["total"] and dry["total"] == dry["allocated"] + dry["fixed"]
    ok &= good
    print(("ok   " if good else "FAIL ") + f"{prec}: {n/1e6:.1f}M parameters; dry-run {dry['allocated']/1e6:.1f} MB "
          f"= accounted {acct['total']/1e6:.1f} MB, by category and in total (+ {dry['fixed']/1e6:.1f} MB the "
          f"backend keeps)")
    rel = rss / dry["total"] - 1
    good = abs(rel) <= 0.05
    ok &= good
    print(("ok   " if good else "FAIL ") + f"{prec}: peak RSS {rss/1e6:.1f} MB vs predicted {dry['total']/1e6:.1f} MB "
          f"({100*rel:+.1f} %, limit 5 %)")
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] || fail "bf16 memory: the dry-run, the accounting and the OS disagree"
echo "PASS memory_bf16"
