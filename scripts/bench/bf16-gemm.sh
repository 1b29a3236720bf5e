#!/usr/bin/env bash
# The CPU GEMM for bf16 mixed precision (issue 13), measured: fp32 sgemm
# (baseline), convert-then-sgemm (inputs rounded to bf16 values held in fp32,
# then cblas_sgemm) and cblas_sbgemm (bf16 inputs, fp32 accumulation) side by
# side in one run, on a GPT linear layer's GEMMs (N = ROWS tokens, widths C,
# the [C -> 4C] layer's forward and backward GEMMs and the [4C -> C] forward).
# Prints GFLOP/s, ratios to fp32 and the agreement of the two bf16 ways; see
# scripts/bench/bf16_gemm.c for what each column times.
#   ROWS=1024 WIDTHS=256,512,768 REPS=5 scripts/bench/bf16-gemm.sh
# Debian's OpenBLAS (0.3.21) has no cblas_sbgemm (its cblas.h declares it, the
# library is built without BUILD_BFLOAT16): the sbgemm columns stay empty
# unless DTRUN_SBGEMM_LIB names a libopenblas.so that has it, e.g. one built
# from OpenBLAS's sources with `make BUILD_BFLOAT16=1` (not part of dtrun).
# Threads: OMP_NUM_THREADS (default: every core), OpenBLAS single-threaded
# inside each slab, as dtrun's CPU backend runs its GEMMs.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
make -s build/bench/bf16_gemm
echo "# $(date -u +%F) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus," \
     "bf16 instructions: $(grep -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)"
echo "# OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
rc=0
build/bench/bf16_gemm --rows "${ROWS:-1024}" --widths "${WIDTHS:-256,512,768}" --reps "${REPS:-5}" || rc=$?
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
