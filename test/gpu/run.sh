#!/usr/bin/env bash
# make test-gpu: each CUDA op against its CPU twin and 50-step GPT and ViT (fp32 and bf16)
# runs on the CUDA backend against the CPU's (test/gpu/test_ops_twin.c); the
# communication layer on the GPU: NCCL on one rank, timeout and abort, 2 and 3
# ranks sharing the GPU over shm with device buffers staged, NCCL's refusal of
# two ranks on one GPU (test/gpu/test_nccl.c); whole training runs of two
# ranks sharing the GPU through the launcher, dp2, tp2 and pp2, against one
# process (test/gpu/share_gpu.sh); train.cuda_graphs on several ranks: two
# sharing a GPU refused, two GPUs over NCCL graphs on against off
# (test/gpu/graphs_ranks.sh); a short GPT and ViT run, fp32 and bf16,
# under compute-sanitizer memcheck (test/gpu/sanitizer.sh). Every
# build/test-gpu/* and test/gpu/*.sh runs.
#   - no GPU (no nvidia-smi, it lists no device, or cudaGetDeviceCount finds
#     none): one line "test-gpu: no CUDA device: skipped", exit 0;
#   - a GPU but no CUDA backend in the build (no nvcc or NCCL, or CUDA=0):
#     that is a failure on a GPU machine, said in one line, exit 1;
#   - else builds the test programs, runs them, counts "ok - " / "not ok - "
#     lines and ends with "N passed, N failed".
# Called by the Makefile with BUILD, CUDA_ON and MAKE set (defaults below).
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "test-gpu: no CUDA device: skipped"
  exit 0
fi
if [ "${CUDA_ON:-}" != 1 ]; then
  echo "test-gpu: a GPU is present but the CUDA backend is not built (needs nvcc and nccl.h under CUDA_HOME, and CUDA != 0)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
if ! $MAKE --no-print-directory all gpu-tests-bin >"${TMPDIR:-/tmp}/dtrun-test-gpu-build.log" 2>&1; then
  tail -30 "${TMPDIR:-/tmp}/dtrun-test-gpu-build.log" >&2
  echo "test-gpu: build failed (log: ${TMPDIR:-/tmp}/dtrun-test-gpu-build.log)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

pass=0 fail=0
log=$(mktemp -d "${TMPDIR:-/tmp}/dtrun-test-gpu.XXXXXX")
for bin in "$BUILD"/test-gpu/* test/gpu/*.sh; do
  [ -x "$bin" ] || continue
  [ "$bin" = test/gpu/run.sh ] && continue
  name=$(basename "$bin")
  out="$log/$name.log"
  timeout -k 5 "${DTRUN_TEST_TIMEOUT:-600}" "$bin" >"$out" 2>&1; rc=$?
  if grep -q '^test-gpu: no CUDA device: skipped' "$out"; then
    # nvidia-smi lists a GPU but cudaGetDeviceCount finds none (driver and
    # runtime mismatch, a container without the device node): no device for
    # us either, so skip as promised, but say why in the one line
    echo "test-gpu: no CUDA device: skipped (nvidia-smi lists a GPU, cudaGetDeviceCount finds none)"
    exit 0
  fi
  grep -E '^(ok|not ok) - |^# ' "$out"
  p=$(grep -c '^ok - ' "$out"); f=$(grep -c '^not ok - ' "$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1; echo "not ok - $name exited $rc"; tail -5 "$out" | sed 's/^/    /'
  fi
  pass=$((pass + p)); fail=$((fail + f))
done
echo "logs: $log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
