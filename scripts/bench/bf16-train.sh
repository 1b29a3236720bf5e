#!/usr/bin/env bash
# bf16 mixed precision against fp32 on the CPU backend, side by side in one
# sitting: the cpu-train.sh model (GPT L4 C256 H4 V256 T256 B4, AdamW, 2
# threads) trained 30 steps in each precision, interleaved rounds, median
# tokens/s over steps 6..30, best round of each, printed as bf16 / fp32.
# On the CPU the bf16 twin computes in fp32 from bf16 values (DESIGN.md: the
# CPU twin holds the rounding points, the GPU kernels get the speed), so this
# measures what the rounding and widening cost, not a speed-up.
#   ROUNDS=3 scripts/bench/bf16-train.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
rounds=${ROUNDS:-3}
make -s all >/dev/null
tmp=$(mktemp -d /tmp/dtrun-bf16-train.XXXXXX); trap 'rm -rf "$tmp"' EXIT
for prec in fp32 bf16; do
  sed -e "s|metrics: runs/bench-cpu-train.jsonl|metrics: $tmp/$prec.jsonl|" \
      -e "s|train: {|train: {precision: $prec, |" scripts/bench/configs/cpu-train.yaml >"$tmp/$prec.yaml"
done
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= rounds; r++)); do
  for prec in fp32 bf16; do
    OMP_NUM_THREADS=2 bin/dtrun "$tmp/$prec.yaml" >/dev/null 2>&1
    python3 - "$tmp/$prec.jsonl" "$prec" >>"$tmp/rows" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print(sys.argv[2], statistics.median(r["tokens_per_s"] for r in rows[5:]))
PY
  done
done
echo "rounds: $rounds  load: $load0 -> $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp/rows" <<'PY'
import sys
best = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    best[k] = max(best.get(k, 0.0), float(v))
print(f"cpu-train tok/s  fp32 {best['fp32']:9.1f}  bf16 {best['bf16']:9.1f}  bf16/fp32 {best['bf16'] / best['fp32']:.3f}")
PY
