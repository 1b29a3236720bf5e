#!/usr/bin/env bash
# GPT-2 training throughput on one GPU: dtrun's CUDA backend against PyTorch on
# the same machine, side by side in one run, with MFU and llm.c's published
# figures as reference lines.
#   dtrun    scripts/bench/gpu_train.c: the built-in GPT on dt_ops_cuda()
#            (fp32 today; TF32 with DTRUN_TF32=1; no bf16 path yet)
#   pytorch  scripts/bench/gpu_torch.py: the same model, torch.compile, bf16
#            autocast + flash attention (the goal's peer), and also fp32 with
#            TF32 off (the same-arithmetic peer) unless TORCH_FP32=0
# Models: GPT-2 124M and 350M at T=1024, vocab 50257.
# MFU = tokens/s * model FLOPs per token / the GPU's dense bf16 peak (H100 and
# H200 SXM: 989.4 TFLOP/s), the same FLOP formula on both sides (dtrun's
# model_flops_per_sample, no recompute counted).
#   MODELS="124m 350m" B124=16 B350=8 STEPS=10 scripts/bench/gpu.sh
#   DEPS_PREFIX=build/device-deps ...  (a bare machine: scripts/device-check.sh)
# Results: stdout; with OUT set, also $OUT/bench-gpu.jsonl and $OUT/bench-gpu.txt.
# Runs only on a GPU machine: without one it says so and exits 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
models=${MODELS:-124m 350m}
steps=${STEPS:-10}
py=${PYTHON:-python3}
build=${BUILD:-build}

die() { echo "gpu.sh: $*" >&2; exit 1; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  die "no CUDA GPU on this machine: this benchmark runs only on a GPU machine (see scripts/device-check.sh)"
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  die "$py has no PyTorch with CUDA (the peer); set PYTHON=... to one that has"

make -s --no-print-directory BUILD="$build" gpu-bench-bin >/dev/null ||
  die "building $build/bench/gpu_train failed (is the CUDA backend built? make prints why)"

case "$gpu" in
  *H100*|*H200*) peak=989.4e12 ;;
  *A100*) peak=312e12 ;;
  *) peak=${PEAK_FLOPS:-}; [ -n "$peak" ] || die "unknown GPU '$gpu': set PEAK_FLOPS (dense bf16 FLOP/s)" ;;
esac

tmp=$(mktemp -d /tmp/dtrun-bench-gpu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
jsonl=$tmp/bench.jsonl
: >"$jsonl"

run() { # label command...
  local label=$1; shift
  echo "# $label: $*" >&2
  if "$@" >"$tmp/one.json" 2>"$tmp/one.err"; then
    tail -1 "$tmp/one.json" >>"$jsonl"
  else
    echo "# $label FAILED:" >&2; tail -5 "$tmp/one.err" | sed 's/^/#   /' >&2
    printf '{"impl":"%s","failed":true}\n' "$label" >>"$jsonl"
  fi
}

for m in $models; do
  case $m in 124m) B=${B124:-16} ;; 350m) B=${B350:-8} ;; *) die "unknown model $m (124m, 350m)" ;; esac
  tf=(); [ "${DTRUN_TF32:-0}" = 1 ] && tf=(--tf32)
  run "dtrun gpt2-$m" "$build/bench/gpu_train" --model "$m" --batch "$B" --steps "$steps" ${tf[@]+"${tf[@]}"}
  run "pytorch bf16 gpt2-$m" "$py" scripts/bench/gpu_torch.py --model "$m" --batch "$B" --steps "$steps" --precision bf16
  if [ "${TORCH_FP32:-1}" = 1 ]; then
    run "pytorch fp32 gpt2-$m" "$py" scripts/bench/gpu_torch.py --model "$m" --batch "$B" --steps "$steps" --precision fp32
  fi
done

"$py" - "$jsonl" "$peak" "$gpu" <<'PY' | tee "$tmp/bench.txt"
import json, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peak, gpu = float(sys.argv[2]), sys.argv[3]
print(f"GPU training throughput, {gpu}, {datetime.date.today()} (MFU vs dense bf16 peak {peak/1e12:.1f} TFLOP/s)")
print(f"{'impl':<18} {'model':<10} {'prec':<5} {'B':>3} {'T':>5} {'step ms':>9} {'tokens/s':>10} {'MFU':>6}")
by = {}
for r in rows:
    if r.get("failed"):
        print(f"{r['impl']:<40} FAILED"); continue
    mfu = r["tokens_per_s"] * r["flops_per_token"] / peak
    by[(r["impl"].split("+")[0], r["model"], r["precision"])] = r["tokens_per_s"]
    print(f"{r['impl']:<18} {r['model']:<10} {r['precision']:<5} {r['B']:>3} {r['T']:>5} "
          f"{r['step_ms']:>9.1f} {r['tokens_per_s']:>10.0f} {100*mfu:>5.1f}%")
for model in sorted({k[1] for k in by}):
    d = [v for k, v in by.items() if k[0] == "dtrun" and k[1] == model]
    for prec in ("bf16", "fp32"):
        p = by.get(("pytorch", model, prec))
        if d and p:
            print(f"ratio {model}: dtrun / pytorch+compile {prec} = {d[0] / p:.2f}x")
print("goal (issue 7): >= 1.2x pytorch+compile bf16 tokens/s; >= 50% MFU on gpt2-350m")
print("reference, llm.c (published, not measured here):")
print("  GPT-2 124M: 10B tokens in ~90 min on 8x A100 80GB SXM (karpathy/llm.c discussion #481)"
      " => ~0.23M tokens/s per A100, derived")
print("  GPT-2 1558M: reproduced on one 8x H100 node in 24 h (karpathy/llm.c discussion #677)")
print("  llm.c on H100: about 43% MFU (figure quoted by issue 7)")
PY

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$jsonl" "$OUT/bench-gpu.jsonl"
  cp "$tmp/bench.txt" "$OUT/bench-gpu.txt"
fi
