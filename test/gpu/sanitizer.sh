#!/usr/bin/env bash
# Issue 14: "compute-sanitizer memcheck clean on a short run". A small GPT and
# a small ViT train a few steps on the GPU (`dtrun worker`, one process, the
# whole engine: embedding, layernorm, the GEMMs with their GELU epilogues, the
# fused attention, the chunked LM head, AdamW over all tensors, the bf16
# narrowing), in fp32 and in bf16, under NVIDIA's compute-sanitizer:
#   memcheck  (out-of-bounds and misaligned accesses, leaks at exit): always
#   racecheck (shared-memory hazards: the attention kernels' tiles) and
#   synccheck (barriers in divergent code): with
#   SANITIZER_TOOLS="memcheck racecheck synccheck" (slower; not in the
#   device-check's ten-minute budget)
# Each run must exit 0 and report "ERROR SUMMARY: 0 errors". Run by
# test/gpu/run.sh (make test-gpu) on a GPU machine; prints "ok - " /
# "not ok - " lines.
source "$(dirname "$0")/../parallel/lib.bash"
export CUDA_VISIBLE_DEVICES=${GPU_SHARE_DEVICE:-0}

san=$(command -v compute-sanitizer || true)
for d in "${CUDA_HOME:-/usr/local/cuda}/bin" /usr/local/cuda/bin; do
  [ -z "$san" ] && [ -x "$d/compute-sanitizer" ] && san=$d/compute-sanitizer
done
if [ -z "$san" ]; then
  echo "not ok - sanitizer: compute-sanitizer not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin)"
  exit 1
fi

job() { # MODEL PRECISION OUT
  sed -e 's/^  steps: .*/  steps: 3/' -e 's/^  eval_batches: .*/  eval_batches: 1/' \
      -e "s/^  seed: \(.*\)/  seed: \1\n  precision: $2/" "$ROOT/test/parallel/$1.yaml" >"$3"
  grep -q '^  device:' "$3" || sed -i -e 's/^  seed: .*/&\n  device: cuda/' "$3"
  grep -q "precision: $2" "$3" && grep -q 'device: cuda' "$3"
}

bad=0
for tool in ${SANITIZER_TOOLS:-memcheck}; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  for model in gpt-cuda vit-tiny; do
    for prec in fp32 bf16; do
      name=$tool-$model-$prec
      job "$model" "$prec" "$T/$name.yaml" || { echo "not ok - sanitizer: could not write $name's job"; bad=1; continue; }
      timeout -k 5 500 "$san" --tool "$tool" "${extra[@]}" --error-exitcode 9 \
        "$DTRUN" worker "$T/$name.yaml" >"$T/$name.log" 2>&1
      rc=$?
      summary=$(grep -m1 'ERROR SUMMARY' "$T/$name.log" || echo "no ERROR SUMMARY line")
      if [ $rc -eq 0 ] && grep -q 'ERROR SUMMARY: 0 errors' "$T/$name.log"; then
        echo "ok - sanitizer: $tool, $model $prec, 3 steps: $summary"
      else
        echo "not ok - sanitizer: $tool, $model $prec: exit $rc, $summary"
        grep -m12 -E '=========|dtrun:' "$T/$name.log" | sed 's/^/#   /'
        bad=1
      fi
    done
  done
done
exit $bad
