#!/usr/bin/env bash
# `dtrun job.yaml` starts the built-in trainer through the agent (/proc/self/exe
# worker JOB): options come from the job's launch: section, the command line
# wins (--print-config shows the result), worker output is prefixed.
source "$(dirname "$0")/../helpers/launch_common.bash"
cat >"$T/tiny.yaml" <<'YAML'
model: {kind: gpt, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 256, seq_len: 16}
data: {kind: synthetic}
train: {steps: 3, global_batch: 4, micro_batch: 2}
launch: {nproc_per_node: "1", max_restarts: 0}
YAML
timeout -k 2 60 "$DTRUN" "$T/tiny.yaml" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/out" "$T/err"; fail "built-in trainer: exit $rc"; }
grep -q '^\[default/0\]:.*3' "$T/out" "$T/err" || { cat "$T/out" "$T/err"; fail "no prefixed trainer output"; }
grep -q '^\[default/1\]' "$T/out" "$T/err" && fail "launch.nproc_per_node 1 started a second worker"
"$DTRUN" --print-config --nproc-per-node=4 --max_restarts 2 "$T/tiny.yaml" >"$T/cfg" 2>&1 || { cat "$T/cfg"; fail "--print-config"; }
grep -Eq 'nproc_per_node: "?4"?' "$T/cfg" && grep -q 'max_restarts: 2' "$T/cfg" || { cat "$T/cfg"; fail "--print-config lacks the command line's launch values"; }
echo "ok: built-in trainer through the agent; launch: section and command line merged"
