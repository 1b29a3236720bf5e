#!/usr/bin/env bash
# `dtrun --trace FILE` (issue 5): a merged Chrome-trace / Perfetto JSON of every
# rank's compute, communication and idle spans. Through the command-line flag
# (a 4-rank dp x pp pipeline with ZeRO-2), through the job's log.trace key (a ViT
# under FSDP), and a single worker: the file is valid JSON (python3 -m json.tool),
# the ranks' parts are gone, and test/parallel/trace_check.py checks the spans
# (lanes, nesting, per-rank comm and idle totals = the rank's own metrics). A
# trace in a directory that does not exist is refused before anything starts.
source "$(dirname "$0")/../parallel/lib.bash"

steps=3
short() { sed -i -e "s/^  steps: .*/  steps: $steps/" "$1"; }

# 1. the flag: dp 2 x pp 2, ZeRO-2, 1F1B
layout_job gpt-tiny "dp=2 pp=2 mode=zero2 sched=1f1b" "$T/pipe.yaml" "$T/pipe.jsonl"
short "$T/pipe.yaml"
timeout -k 5 120 "$DTRUN" --nproc-per-node=4 --trace "$T/pipe-trace.json" "$T/pipe.yaml" >"$T/pipe.log" 2>&1 ||
  { tail -n 20 "$T/pipe.log"; fail "dp2 pp2 zero2 with --trace did not train"; }
python3 -m json.tool "$T/pipe-trace.json" >/dev/null || fail "--trace wrote invalid JSON"
ls "$T"/pipe-trace.rank*.json >/dev/null 2>&1 && fail "the ranks' parts were left behind"
python3 "$ROOT/test/parallel/trace_check.py" "$T/pipe-trace.json" "$T/pipe" 4 $steps \
  "idle:wait: RECV_" "idle:wait: loss" "comm:reduce_scatter" "compute:optimizer" || fail "pipeline trace"

# 2. the job's log.trace key: ViT, dp 2 FSDP (a relative path: the workers' directory)
layout_job vit-tiny "dp=2 mode=fsdp" "$T/vit.yaml" "$T/vit.jsonl"
short "$T/vit.yaml"
sed -i -e "s|^  metrics: .*|&\n  trace: vit-trace.json|" "$T/vit.yaml"
(cd "$T" && timeout -k 5 120 "$DTRUN" --nproc-per-node=2 vit.yaml >vit.log 2>&1) ||
  { tail -n 20 "$T/vit.log"; fail "ViT fsdp with log.trace did not train"; }
python3 -m json.tool "$T/vit-trace.json" >/dev/null || fail "log.trace wrote invalid JSON"
python3 "$ROOT/test/parallel/trace_check.py" "$T/vit-trace.json" "$T/vit" 2 $steps \
  "comm:fsdp all_gather" "compute:bwd unit" || fail "fsdp trace"

# 3. one worker, DTRUN_TRACE as the launcher sets it
layout_job gpt-tiny "pp=1" "$T/one.yaml" "$T/one.jsonl"
short "$T/one.yaml"
DTRUN_TRACE=$T/one-trace.json "$DTRUN" worker "$T/one.yaml" >"$T/one.log" 2>&1 ||
  { cat "$T/one.log"; fail "one worker with DTRUN_TRACE"; }
python3 "$ROOT/test/parallel/trace_check.py" "$T/one-trace.json" "$T/one" 1 $steps || fail "single-rank trace"

# 4. a directory that does not exist: one line, exit 2, no worker started
out=$("$DTRUN" --nproc-per-node=2 --trace "$T/no/such/dir/t.json" "$T/vit.yaml" 2>&1); rc=$?
[ $rc -eq 2 ] || fail "--trace into a missing directory: exit $rc, expected 2 ($out)"
case "$out" in *"--trace $T/no/such/dir/t.json: cannot write in"*) ;; *) fail "unclear error: $out" ;; esac
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "more than one line: $out"
echo "ok: --trace, log.trace and DTRUN_TRACE give valid merged traces; a bad path is refused"
