#!/usr/bin/env bash
# model.attention on the CPU backend, fused against naive, side by side in
# one sitting (issue 14):
#  1. the attention core alone (build/bench/attention_bench: one block's
#     forward + backward on the cpu-train model's shapes, B 4, T 256, C 256,
#     4 heads, causal; best of REPS, the kinds interleaved);
#  2. training: the cpu-train.sh model (GPT L4 C256 H4 V256 T256 B4, AdamW,
#     2 threads) 30 steps with each kind, interleaved rounds, median tokens/s
#     over steps 6..30, best round of each, printed as fused / naive.
#   ROUNDS=3 REPS=20 scripts/bench/attention-train.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
rounds=${ROUNDS:-3}
make -s all build/bench/attention_bench >/dev/null
tmp=$(mktemp -d /tmp/dtrun-attention-train.XXXXXX); trap 'rm -rf "$tmp"' EXIT
for kind in fused naive; do
  sed -e "s|metrics: runs/bench-cpu-train.jsonl|metrics: $tmp/$kind.jsonl|" \
      -e "s|seq_len: 256}|seq_len: 256, attention: $kind}|" scripts/bench/configs/cpu-train.yaml >"$tmp/$kind.yaml"
  grep -q "attention: $kind" "$tmp/$kind.yaml" || { echo "attention-train.sh: cannot set model.attention" >&2; exit 1; }
done
echo "# $(date -u +%F) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus"
for t in 1 2; do
  OMP_NUM_THREADS=$t build/bench/attention_bench --B 4 --T 256 --C 256 --NH 4 --causal 1 --reps "${REPS:-20}" |
    sed "s/^/threads $t: /"
done
source scripts/bench/interleaved.bash
interleaved_rounds "$rounds" "$tmp" naive fused
