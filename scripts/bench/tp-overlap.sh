#!/usr/bin/env bash
# parallel.tp_overlap on the CPU backend, side by side in one sitting: the
# cpu-train.sh model (GPT L4 C256 H4 V256 T256 B4, AdamW) under tp 2 with
# sequence parallelism, two ranks of one thread each over shm, 30 steps with
# the column layers' backward collectives in line (false) and beside their
# GEMMs (true), interleaved rounds, median tokens/s over steps 6..30, best
# round of each, printed as true / false. The runs are bitwise the same
# (test/integration/tp_overlap.sh); this measures only the time. On a
# machine with a core per rank and nothing else the collectives' worker
# thread competes with the compute for the cores, so the gain here is a
# lower bound of what a GPU's separate NCCL stream gets.
#   ROUNDS=3 scripts/bench/tp-overlap.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
rounds=${ROUNDS:-3}
make -s all >/dev/null
tmp=$(mktemp -d /tmp/dtrun-tp-overlap.XXXXXX); trap 'rm -rf "$tmp"' EXIT
for kind in inline overlap; do
  ov=$([ "$kind" = overlap ] && echo true || echo false)
  sed -e "s|metrics: runs/bench-cpu-train.jsonl|metrics: $tmp/$kind.jsonl|" -e "s|threads: 2|threads: 1|" \
      scripts/bench/configs/cpu-train.yaml >"$tmp/$kind.yaml"
  printf 'parallel: {tp: 2, sequence_parallel: true, tp_overlap: %s}\nlaunch: {nproc_per_node: 2}\n' "$ov" \
    >>"$tmp/$kind.yaml"
done
echo "# $(date -u +%F) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus"
source scripts/bench/interleaved.bash
interleaved_rounds "$rounds" "$tmp" inline overlap
