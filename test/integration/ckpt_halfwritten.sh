#!/usr/bin/env bash
# A step directory left half-written (a save cut short by a full disk or a
# crash: rank files and .tmp debris, no index.json) is removed at the next
# start, with one line saying so (issue 15, point 15); the committed steps and
# `latest` are untouched and the run resumes from them.
source "$(dirname "$0")/../helpers/preflight.bash"
cd "$T" || exit 1

tiny_job job.yaml "checkpoint: {dir: ck, every: 2, keep: 5}"
run_dtrun first job.yaml
[ "$rc" -eq 0 ] && [ "$(cat ck/latest)" = step_000004 ] || fail "first run: exit $rc"
# debris of a save the run never reaches again (step 10 of a longer run)
mkdir -p ck/step_000010 && head -c 5000 /dev/urandom >ck/step_000010/rank_00000.safetensors.tmp
head -c 100 /dev/urandom >ck/step_000010/rank_00000.safetensors
sed -i 's/steps: 4/steps: 6/; s/every: 2/every: 0/' job.yaml
run_dtrun second job.yaml
[ "$rc" -eq 0 ] || fail "second run: exit $rc: $(tail -3 "$T/second.err")"
grep -q "^dtrun: ck: removed 1 half-written step directory left by an earlier run: step_000010$" "$T/second.err" &&
  [ ! -e ck/step_000010 ] && ok "the half-written step_000010 was removed at start" || fail "no line about the removal: $(head -3 "$T/second.err")"
grep -q "resuming from ck/step_000004: step 4" "$T/second.out" && [ -f ck/step_000002/index.json ] &&
  [ -f ck/step_000006/index.json ] &&
  ok "resumed from step 4, committed steps kept, step 6 saved whole" || fail "after: $(ls ck ck/step_000006)"
finish
