#!/usr/bin/env bash
# Issue 14, item 5: two ranks on ONE GPU through the real launcher — compute on
# the GPU (train.device: cuda), communication over the CPU transport (NCCL
# refuses two ranks on one GPU, so the world takes shm and the comm layer
# stages the device buffers through host memory, comm_stage.c). For a small
# GPT (test/parallel/gpt-cuda.yaml) under dp2, tp2 and pp2 (1F1B):
#   - `dtrun --nproc-per-node=2 job.yaml` exits 0 and says its layout runs
#     "on cuda, comm shm";
#   - every step's loss and the final parameters equal one process on the GPU
#     (`dtrun worker`, the same job at dp = tp = pp = 1) within tolerance.
# Tolerance: 1e-4 relative on the losses, 1e-3 on the parameters, ten times
# the CPU backend's (test/parallel/lib.bash): cuBLAS picks its kernels by
# shape, and a rank's half batch or half of the heads is another shape than
# one process's whole, so its sums are ordered differently; 20 AdamW steps
# then amplify those last-bit differences where a gradient is near zero.
# Run by test/gpu/run.sh (make test-gpu) on a GPU machine; prints "ok - " /
# "not ok - " lines.
source "$(dirname "$0")/../parallel/lib.bash"
LOSS_RTOL=${GPU_LOSS_RTOL:-1e-4}
PARAM_ATOL=${GPU_PARAM_ATOL:-1e-3}
export CUDA_VISIBLE_DEVICES=${GPU_SHARE_DEVICE:-0} # one GPU, whatever the machine has

for lay in "dp=2" "tp=2" "pp=2 sched=1f1b"; do
  name=gpt-cuda-$(layout_name "$lay")
  before=$FAILS
  run_layout gpt-cuda "$lay" >"$T/$name.out" 2>&1
  sed 's/^/# /' "$T/$name.out"
  if [ "$FAILS" -ne "$before" ]; then
    echo "not ok - share_gpu: [$lay] on one GPU over the CPU transport: $(grep -m1 FAIL "$T/$name.out")"
    continue
  fi
  if ! grep -q "on cuda, comm shm" "$T/$name.log"; then
    echo "not ok - share_gpu: [$lay]: the run did not say 'on cuda, comm shm':"
    grep -m3 "layout" "$T/$name.log" | sed 's/^/#   /'
    FAILS=$((FAILS + 1))
    continue
  fi
  echo "ok - share_gpu: [$lay] on one GPU, comm shm: $(grep -m1 '^ok' "$T/$name.out" | sed 's/^ok *//')"
done
# the references ran on the GPU too: their per-rank records name the backend
refs_ok=1
for f in "$T"/ref-gpt-cuda-*.rank0.jsonl; do
  [ -f "$f" ] && grep -q 'on cuda' "$f" && continue
  refs_ok=0; echo "# $f: $(head -c 300 "$f" 2>/dev/null)"
done
if [ $refs_ok = 1 ]; then echo "ok - share_gpu: the one-process references ran on cuda"
else echo "not ok - share_gpu: a one-process reference did not run on cuda"; FAILS=$((FAILS + 1)); fi
[ "$FAILS" -eq 0 ]
