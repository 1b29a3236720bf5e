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
source scripts/bench/interleaved.bash
interleaved_rounds "$rounds" "$tmp" fp32 bf16
