#!/usr/bin/env bash
# dtrun-test: waits (it mostly sleeps on timeouts: test/run.sh runs it in the side lane, beside the pool)
# One run per checkpoint directory and per metrics file (issue 15, point 12):
# while a run trains, a second run on the same checkpoint.dir (the same YAML
# started twice), or on another directory but the same log.metrics, refuses at
# once, before spawning: one line naming the path and the first run's pid and
# host, exit 2. The first run is untouched and finishes; once it has ended the
# directory is free again (flock dies with its holder, so a kill -9 leaves no
# stale lock either). A symbolic link to the same checkpoint directory or
# metrics file is the same file: refused too.
source "$(dirname "$0")/../helpers/preflight.bash"
cd "$T" || exit 1

tiny_job a.yaml "checkpoint: {dir: ck, every: 1}" "log: {metrics: runs/m.jsonl}"
sed -i 's/steps: 4/steps: 40/' a.yaml
tiny_job b.yaml "checkpoint: {dir: ck2, every: 1}" "log: {metrics: runs/m.jsonl}"
# the first run, slowed to ~0.1 s a step
DTRUN_TEST_STEP_DELAY_MS=100 "$DTRUN" a.yaml >first.out 2>first.err &
first=$!
for _ in $(seq 1 100); do [ -f ck/.dtrun.lock ] && grep -q '^\[default/0\]' first.out && break; sleep 0.05; done

start=$(date +%s%N)
run_dtrun same a.yaml
ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_one_line same 2 "dtrun: a.yaml: checkpoint.dir ck: in use by another dtrun run (pid $first on host $(hostname)"
[ "$ms" -lt 2000 ] && ok "refused in $ms ms" || fail "the refusal took $ms ms"
run_dtrun metrics b.yaml
expect_one_line metrics 2 "dtrun: b.yaml: log.metrics runs/m.jsonl: in use by another dtrun run (pid $first on host"
[ ! -e ck2/latest ] || fail "the refused run saved a checkpoint"
# the same files through symbolic links (issue 26, item 5): locks follow the
# resolved file, not the name (before: not refused, and the metrics wiped)
ln -s runs/m.jsonl m-link.jsonl
ln -s ck ck-link
tiny_job c.yaml "checkpoint: {dir: ck3}" "log: {metrics: m-link.jsonl}"
run_dtrun linkmetrics c.yaml
expect_one_line linkmetrics 2 "dtrun: c.yaml: log.metrics m-link.jsonl: in use by another dtrun run (pid $first on host" \
  "lock $T/runs/.m.jsonl.dtrun.lock"
tiny_job d.yaml "checkpoint: {dir: ck-link}"
run_dtrun linkdir d.yaml
expect_one_line linkdir 2 "dtrun: d.yaml: checkpoint.dir ck-link: in use by another dtrun run (pid $first on host" \
  "lock $T/ck/.dtrun.lock"

wait "$first"; rc=$?
[ "$rc" -eq 0 ] && grep -q "done: 40 steps" first.out && ok "the first run finished untouched" ||
  fail "first run: exit $rc: $(tail -3 first.err)"
python3 -c '
import json, sys
steps = [json.loads(l)["step"] for l in open("runs/m.jsonl") if "loss" in json.loads(l)]
assert steps == list(range(1, 41)), steps
' && ok "its metrics file holds steps 1-40, once each" || fail "the metrics file is mixed"

# a holder killed with -9 leaves no lock behind
DTRUN_TEST_STEP_DELAY_MS=100 "$DTRUN" b.yaml >killed.out 2>killed.err &
k=$!
for _ in $(seq 1 100); do grep -q '^\[default/0\]' killed.err && break; sleep 0.05; done
kill -9 "$k"; wait "$k" 2>/dev/null
sleep 0.3
run_dtrun after b.yaml
[ "$rc" -eq 0 ] && ok "after kill -9 of the holder the directory is free" || fail "after kill -9: exit $rc: $(tail -2 "$T/after.err")"
finish
