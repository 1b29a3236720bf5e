#!/usr/bin/env bash
# A data file truncated while a run reads it (issue 15, point 13): the worker
# used to die of SIGBUS (exit 135, no output) and lose its progress. Now the
# run stops with exit 3, one line naming the file and its size when opened and
# now, and a checkpoint of the last whole step, from which the same command
# resumes once the file is whole again.
source "$(dirname "$0")/../helpers/preflight.bash"
cd "$T" || exit 1

python3 -c 'import os; open("corpus.txt", "wb").write(bytes(b % 200 for b in os.urandom(4 << 20)))'
cp corpus.txt corpus.orig
tiny_job job.yaml "data: {kind: text, train: corpus.txt}" "checkpoint: {dir: ck}"
sed -i 's/vocab_size: 32/vocab_size: 256/; s/steps: 4/steps: 200/' job.yaml
DTRUN_TEST_STEP_DELAY_MS=50 "$DTRUN" job.yaml >out 2>err &
agent=$!
( sleep 40 && kill -9 $agent ) >/dev/null 2>&1 &
watchdog=$!
for _ in $(seq 1 200); do grep -q 'step 5/200' out && break; sleep 0.05; done
truncate -s 1024 corpus.txt
wait $agent; rc=$?
kill $watchdog 2>/dev/null
[ "$rc" -eq 3 ] && ok "exit 3" || fail "exit $rc, expected 3: $(tail -3 err)"
line=$(grep "data file changed" err | head -1)
[[ $line == *"corpus.txt: the data file changed while the run read it: 4194304 bytes when opened, 1024 now"* ]] &&
  ok "one line: ${line#*]:}" || fail "no line naming the file and its sizes: $(tail -5 err)"
step=$(sed 's/step_0*//' ck/latest 2>/dev/null)
[ -n "$step" ] && [ "$step" -ge 5 ] && [ "$step" -lt 200 ] && [[ $line == *"step $step saved to ck"* ]] &&
  ok "checkpoint of step $step" || fail "no checkpoint of the current state (latest: $(cat ck/latest 2>/dev/null))"
cp corpus.orig corpus.txt
run_dtrun resume job.yaml
[ "$rc" -eq 0 ] && grep -q "resuming from ck/step_0*$step: step $step" "$T/resume.out" && ok "resumed from step $step" ||
  fail "resume: exit $rc: $(tail -2 "$T/resume.err")"
finish
