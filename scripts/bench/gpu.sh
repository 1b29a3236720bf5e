#!/usr/bin/env bash
# Training throughput on one GPU, side by side in one run: dtrun's CUDA backend,
# PyTorch and llm.c on the same machine, with MFU by one FLOP formula for every
# row, and for dtrun the dry-run's memory prediction next to what the driver
# measured for the same job.
#   dtrun    build/bench/gpu_train (scripts/bench/gpu_train.c): the worker engine
#            as `dtrun job.yaml` runs it in one process, synthetic data;
#            train.precision fp32 (TF32 off; DTRUN_TF32=1: on) and bf16;
#            DTRUN_CUDA_GRAPHS=1 adds a "dtrun+graphs" row after each dtrun
#            row: the same job with train.cuda_graphs (the step replayed as
#            CUDA graphs), which never fails the script (a new path, not yet
#            run on a GPU: its failure is a FAILED row with the reason)
#   pytorch  scripts/bench/gpu_torch.py: the same models, torch.compile, bf16
#            autocast + flash attention (the goal's peer), and with
#            TORCH_FP32=1 also fp32 with TF32 off (the same-arithmetic peer)
#   llm.c    karpathy/llm.c's train_gpt2cu (bf16, its defaults), GPT models
#            only, built here with nvcc from build/device-deps/llm.c (put
#            there by scripts/device-check.sh --prepare; LLMC_DIR= another
#            copy); run by scripts/bench/llmc_run.py. Optional (LLMC=0: off):
#            a build or run that fails is a FAILED row with the reason, never
#            the script's failure
# Models (MODELS): gpt2-124m and gpt2-350m at T=1024, vocab 50257; vit-b16 at
# 224x224 (patch 16, 12 layers, C 768, 12 heads, 1000 classes).
# In this order by default: the two GPT rows the goal names (1.2x torch.compile
# at 124M, 50 % MFU at 350M) come first, so a short device session (the
# deadline below) spends its minutes on them.
# MFU = items/s x FLOPs per item (scripts/bench/flops.py: dtrun's
# model_flops_per_sample, recompute not counted) / the GPU's dense bf16 peak
# (H100 and H200 SXM: 989.4 TFLOP/s), for every row and precision.
# Memory: "GPU GiB" is the driver's used memory (total - free) at the process's
# peak as the process itself samples it (dtrun and PyTorch after every step,
# llm.c after it allocated), "smi GiB" the largest nvidia-smi memory.used
# sampled every 100 ms during the row; "dry-run GiB" dtrun's prediction for
# the same job (gpu_train writes it to $BUILD/bench/jobs/job-MODEL-PREC.yaml;
# `bin/dtrun --dry-run` of that file prints the same), "meas/pred" the ratio.
#   MODELS="gpt2-124m gpt2-350m vit-b16" B124=16 B350=8 BVIT=64 STEPS=10 WARMUP=3 \
#   DTRUN_PRECISIONS="bf16 fp32" TORCH_FP32=0 LLMC=1 ROW_TIMEOUT=300 scripts/bench/gpu.sh
# Rows of a model run in this order: dtrun bf16, pytorch bf16, llm.c, dtrun
# fp32, pytorch fp32 (TORCH_FP32=1; each torch.compile costs about a minute).
# BENCH_DEADLINE (seconds since the epoch; device-check.sh sets it so that its
# one command ends inside the device tool's 10 minutes): a row that would start
# with less than 30 s left is a failed row "skipped: out of time", and a row's
# time limit never passes the deadline.
#   DEPS_PREFIX=build/device-deps ...  (a bare machine: scripts/device-check.sh)
# Results: stdout; with OUT set, also $OUT/bench-gpu.jsonl (written row by row,
# so a run stopped at a time limit still leaves its rows) and $OUT/bench-gpu.txt.
# Runs only on a GPU machine: without one it says so and exits 1. Exit 1 also
# when a dtrun row failed (PyTorch and llm.c rows are peers: they never fail
# it; nor does a row skipped for the time budget).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
models=${MODELS:-gpt2-124m gpt2-350m vit-b16}
steps=${STEPS:-10}
warmup=${WARMUP:-3}
precisions=${DTRUN_PRECISIONS:-bf16 fp32}
row_timeout=${ROW_TIMEOUT:-300}
py=${PYTHON:-python3}
build=${BUILD:-build}
llmc_dir=${LLMC_DIR:-build/device-deps/llm.c}

die() { echo "gpu.sh: $*" >&2; exit 1; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  die "no CUDA GPU on this machine: this benchmark runs only on a GPU machine (see scripts/device-check.sh)"
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
have_torch=1
"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || {
  have_torch=0; echo "gpu.sh: $py has no PyTorch with CUDA: the pytorch rows say FAILED (PYTHON=... for another)" >&2; }

make -s --no-print-directory BUILD="$build" gpu-bench-bin >/dev/null ||
  die "building $build/bench/gpu_train failed (is the CUDA backend built? make prints why)"

case "$gpu" in
  *H100*|*H200*) peak=989.4e12 ;;
  *A100*) peak=312e12 ;;
  *) peak=${PEAK_FLOPS:-}; [ -n "$peak" ] || die "unknown GPU '$gpu': set PEAK_FLOPS (dense bf16 FLOP/s)" ;;
esac

tmp=$(mktemp -d /tmp/dtrun-bench-gpu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# $OUT comes back from the device tool, at most 8 files: only the rows and the table go there
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT"; jsonl=$OUT/bench-gpu.jsonl; else jsonl=$tmp/bench.jsonl; fi
jobs=$build/bench/jobs
mkdir -p "$jobs"
: >"$jsonl"
dtrun_failed=0

# nvidia-smi's memory.used every 100 ms while a row runs; its peak in bytes
smi_start() {
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$tmp/smi.txt" 2>/dev/null &
  smi_pid=$!
}
smi_stop() {
  kill "$smi_pid" 2>/dev/null; wait "$smi_pid" 2>/dev/null
  local mib; mib=$(grep -E '^[0-9]+' "$tmp/smi.txt" | sort -n | tail -1)
  echo $(( ${mib:-0} * 1048576 ))
}

# failed LABEL MODEL PREC WHY: a row that says why it has no figures
failed() {
  "$py" -c 'import json,sys; print(json.dumps(dict(zip(("impl","model","precision","why"),sys.argv[1:]),failed=True)))' \
    "$@" >>"$jsonl"
}

# row LABEL MODEL PREC COMMAND...: one JSON line into $jsonl, the smi peak
# added; a failure (exit status, time limit, no JSON) becomes a failed row
# (returns 1), a row skipped for BENCH_DEADLINE too (returns 2)
row() {
  local label=$1 model=$2 prec=$3; shift 3
  local limit=$row_timeout
  if [ -n "${BENCH_DEADLINE:-}" ]; then
    local left=$((BENCH_DEADLINE - $(date +%s) - 10))
    if [ $left -lt 30 ]; then
      echo "# $label $model $prec: skipped, out of time" >&2
      failed "$label" "$model" "$prec" "skipped: out of time (BENCH_DEADLINE)"
      return 2
    fi
    [ $left -lt "$limit" ] && limit=$left
  fi
  echo "# $label $model $prec: $*" >&2
  smi_start
  timeout -k 10 "$limit" "$@" >"$tmp/one.out" 2>"$tmp/one.err"; local rc=$?
  local smi; smi=$(smi_stop)
  cat "$tmp/one.err" >&2  # the row's own log: device-check.sh keeps it in bench.log
  local line; line=$(grep '^{' "$tmp/one.out" | tail -1)
  if [ $rc -eq 0 ] && [ -n "$line" ]; then
    "$py" -c 'import json,sys; r=json.loads(sys.argv[1]); r["smi_peak_b"]=int(sys.argv[2]) or None; print(json.dumps(r))' \
      "$line" "$smi" >>"$jsonl"
    return 0
  fi
  local why
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out after ${limit}s"
  else why="exit $rc: $(grep -v '^#' "$tmp/one.err" | grep . | tail -1 | cut -c1-200)"; fi
  echo "# $label $model $prec FAILED: $why" >&2
  failed "$label" "$model" "$prec" "$why"
  return 1
}

# llm.c's train_gpt2cu, once: 0 and its path in $llmc_bin, or 1 and why in $llmc_why
llmc_build() {
  llmc_bin=$build/llmc/train_gpt2cu
  if [ ! -f "$llmc_dir/train_gpt2.cu" ]; then
    llmc_why="no llm.c source in $llmc_dir (scripts/device-check.sh --prepare copies it there from LLMC_SRC)"
    return 1
  fi
  local cuda=${CUDA_HOME:-/usr/local/cuda} nvcc cc
  nvcc=$cuda/bin/nvcc; [ -x "$nvcc" ] || nvcc=$(command -v nvcc) || { llmc_why="no nvcc"; return 1; }
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
  local flags=(--threads=0 -O3 --use_fast_math -std=c++17 -DENABLE_BF16 -include "$PWD/scripts/bench/llmc_cuda13.h"
               --generate-code "arch=compute_${cc:-90},code=[compute_${cc:-90},sm_${cc:-90}]")
  # cuBLAS: the toolkit's, or the shim folder device-check.sh makes (NCCL_HOME) from pip's wheels
  local libs=()
  if [ -n "${NCCL_HOME:-}" ] && [ "$NCCL_HOME" != "$cuda" ]; then
    flags+=(-I"$NCCL_HOME/include"); libs+=(-L"$NCCL_HOME/lib" -Xlinker -rpath="$NCCL_HOME/lib")
  fi
  libs+=(-L"$cuda/lib64" -Xlinker -rpath="$cuda/lib64" -lcublas -lcublasLt)
  # llm.c's mfu.h uses NVML when <nvml.h> is found: link it then (the toolkit's
  # stub, else the driver's library)
  if [ -f "$cuda/include/nvml.h" ] || [ -f "$cuda/targets/x86_64-linux/include/nvml.h" ]; then
    local stub d
    for d in "$cuda/lib64/stubs" "$cuda/targets/x86_64-linux/lib/stubs"; do
      [ -e "$d/libnvidia-ml.so" ] && { stub=$d; break; }
    done
    local so1; so1=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\.so\.1 /{print $NF; exit}')
    if [ -n "${stub:-}" ]; then libs+=(-L"$stub" -lnvidia-ml)
    elif [ -n "$so1" ]; then libs+=("$so1")
    else llmc_why="llm.c wants NVML (nvml.h is in $cuda) but no libnvidia-ml was found"; return 1; fi
  fi
  mkdir -p "$(dirname "$llmc_bin")"
  local out; out=$(cd "$(dirname "$llmc_bin")" && pwd)/$(basename "$llmc_bin")
  echo "# llm.c ($(cat "$llmc_dir/COMMIT" 2>/dev/null || echo 'commit unknown')): $nvcc ${flags[*]} train_gpt2.cu ${libs[*]}" >&2
  if ! (cd "$llmc_dir" && "$nvcc" "${flags[@]}" train_gpt2.cu "${libs[@]}" -o "$out") >"$tmp/llmc-build.log" 2>&1; then
    llmc_why="build failed: $(grep -m1 -E 'error|fatal' "$tmp/llmc-build.log" | cut -c1-200)"
    tail -20 "$tmp/llmc-build.log" | sed 's/^/#   /' >&2
    return 1
  fi
  return 0
}

llmc_ok=0
if [ "${LLMC:-1}" = 1 ]; then
  if llmc_build; then llmc_ok=1; else echo "# llm.c: $llmc_why" >&2; fi
fi

# one row of model $m at batch $B: dtrun / PyTorch in precision $1
dtrun_row() {
  local tf=(); [ "$1" = fp32 ] && [ "${DTRUN_TF32:-0}" = 1 ] && tf=(--tf32)
  row dtrun "$m" "$1" "$build/bench/gpu_train" --model "$m" --batch "$B" --steps "$steps" --warmup "$warmup" \
    --precision "$1" --job "$jobs/job-$m-$1.yaml" ${tf[@]+"${tf[@]}"}
  [ $? = 1 ] && dtrun_failed=1
  if [ "${DTRUN_CUDA_GRAPHS:-0}" = 1 ]; then
    row dtrun+graphs "$m" "$1" "$build/bench/gpu_train" --model "$m" --batch "$B" --steps "$steps" \
      --warmup "$warmup" --precision "$1" --cuda-graphs ${tf[@]+"${tf[@]}"}
  fi
  return 0
}
torch_row() {
  if [ $have_torch = 1 ]; then
    row pytorch+compile "$m" "$1" "$py" scripts/bench/gpu_torch.py --model "$m" --batch "$B" --steps "$steps" \
      --precision "$1"
  else
    failed pytorch+compile "$m" "$1" "no PyTorch with CUDA in $py"
  fi
}

for m in $models; do
  case $m in
    gpt2-124m|124m) m=gpt2-124m; B=${B124:-16} ;;
    gpt2-350m|350m) m=gpt2-350m; B=${B350:-8} ;;
    vit-b16) B=${BVIT:-64} ;;
    *) die "unknown model $m (gpt2-124m, gpt2-350m, vit-b16)" ;;
  esac
  for p in $precisions; do [ "$p" = bf16 ] && dtrun_row bf16; done
  torch_row bf16
  if [ "${LLMC:-1}" = 1 ] && [ "${m%%-*}" = gpt2 ]; then
    if [ $llmc_ok = 1 ]; then
      row llm.c "$m" bf16 "$py" scripts/bench/llmc_run.py --bin "$llmc_bin" --model "$m" --batch "$B" \
        --steps "$steps" --warmup "$warmup" --workdir "$tmp"
    else
      failed llm.c "$m" bf16 "$llmc_why"
    fi
  fi
  for p in $precisions; do [ "$p" != bf16 ] && dtrun_row "$p"; done
  [ "${TORCH_FP32:-0}" = 1 ] && torch_row fp32
done

"$py" scripts/bench/gpu_table.py "$jsonl" "$peak" "$gpu" | tee "$tmp/bench.txt"

[ -n "${OUT:-}" ] && cp "$tmp/bench.txt" "$OUT/bench-gpu.txt"
exit $dtrun_failed
