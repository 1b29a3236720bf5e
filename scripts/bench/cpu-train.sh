#!/usr/bin/env bash
# CPU training throughput, dtrun against PyTorch on the same model, side by side.
#   GPT L=4, C=256, H=4, V=256, T=256, B=4, fp32, 2 threads, AdamW.
# PyTorch is Debian's python3-torch run by /usr/bin/python3, on OpenBLAS
# (libopenblas0-openmp, put first on its library path: Debian's torch otherwise
# may fall back to reference BLAS, ~20x slower). Installs the peer if missing.
# Prints both medians (steps after warm-up) and the ratio dtrun / PyTorch.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
rounds=${ROUNDS:-3}
DTRUN_EXTRA_DEPS="python3-torch libopenblas0-openmp" scripts/deps.sh
make -s all
omp=/usr/lib/x86_64-linux-gnu/openblas-openmp
dt() {
  OMP_NUM_THREADS=2 bin/dtrun scripts/bench/configs/cpu-train.yaml >/dev/null 2>&1
  # median tokens/s over steps 6..30 of the JSONL
  python3 - runs/bench-cpu-train.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print(statistics.median(r["tokens_per_s"] for r in rows[5:]))
PY
}
pt() {
  OMP_NUM_THREADS=2 LD_LIBRARY_PATH=$omp /usr/bin/python3 scripts/bench/torch_gpt.py --threads 2 \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])'
}
best_dt=0 best_pt=0
for r in $(seq "$rounds"); do   # interleaved rounds, best of each: fair under noise
  a=$(dt); b=$(pt)
  printf 'round %d: dtrun %.0f tok/s, pytorch %.0f tok/s\n' "$r" "$a" "$b"
  best_dt=$(python3 -c "print(max($best_dt, $a))"); best_pt=$(python3 -c "print(max($best_pt, $b))")
done
printf 'cpu-train GPT L4 C256 T256 B4 fp32 2 threads: dtrun %.0f tok/s | pytorch %.0f tok/s | ratio %.2fx\n' \
  "$best_dt" "$best_pt" "$(python3 -c "print($best_dt / $best_pt)")"
