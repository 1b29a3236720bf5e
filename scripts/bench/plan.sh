#!/usr/bin/env bash
# Dry-run and planner speed (issue: one config < 20 ms, --plan over 64 GPUs < 1 s).
# Wall time of the whole command (process start included), best of N runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s all
runs=${RUNS:-5}
# the 13B model: the 70B job with the gpt-13b preset
tmp13=$(mktemp --suffix=.yaml); trap 'rm -f "$tmp13"' EXIT
sed s/gpt-70b/gpt-13b/ configs/gpt-70b-h100.yaml >"$tmp13"
best() { # command...
  local b=999999
  for _ in $(seq "$runs"); do
    local t0 t1
    t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
    local ms=$(( (t1 - t0) / 1000000 )); [ "$ms" -lt "$b" ] && b=$ms
  done
  echo "$b"
}
dry=$(best bin/dtrun --dry-run --nnodes 8 --nproc-per-node 8 --hardware a100-40g configs/vit-3b-a100.yaml)
dryj=$(best bin/dtrun --dry-run --format json --nnodes 8 --nproc-per-node 8 --hardware h100-sxm configs/gpt-70b-h100.yaml)
plan=$(best bin/dtrun --plan --nnodes 8 --nproc-per-node 8 --hardware h100-sxm configs/gpt-70b-h100.yaml)
planvit=$(best bin/dtrun --plan --nnodes 8 --nproc-per-node 8 --hardware a100-40g configs/vit-3b-a100.yaml)
plan13=$(best bin/dtrun --plan --nnodes 8 --nproc-per-node 8 --hardware h100-sxm "$tmp13")
printf 'dry-run vit-3b, 64 x a100-40g:          %5d ms (goal < 20 ms)\n' "$dry"
printf 'dry-run gpt-70b --format json, 64 h100: %5d ms (goal < 20 ms)\n' "$dryj"
printf 'plan gpt-70b over 64 h100:              %5d ms (goal < 1000 ms)\n' "$plan"
printf 'plan vit-3b over 64 a100-40g:           %5d ms (goal < 1000 ms)\n' "$planvit"
printf 'plan gpt-13b over 64 h100:              %5d ms (goal < 1000 ms)\n' "$plan13"
printf '(load average: %s)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
