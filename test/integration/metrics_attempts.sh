#!/usr/bin/env bash
# The metrics JSONL tells restarts apart (issue 15, point 10): a worker killed
# with -9 mid-run is restarted (--max-restarts 1) and resumes from its last
# checkpoint; the file then holds an "attempt_start" record per attempt (the
# second with restart_reason naming the killed rank and the step it resumes
# from), every step record carries its attempt, so the steps the second
# attempt repeats are marked; and log.every 2 thins the JSONL as it thins the
# console (even steps and the last only).
source "$(dirname "$0")/../helpers/preflight.bash"
cd "$T" || exit 1

tiny_job job.yaml "checkpoint: {dir: ck, every: 2}" "log: {metrics: m.jsonl, every: 2}"
sed -i 's/steps: 4/steps: 11/' job.yaml
DTRUN_TEST_STEP_DELAY_MS=150 "$DTRUN" --max-restarts 1 job.yaml >out 2>err &
agent=$!
( sleep 30 && kill -9 $agent ) >/dev/null 2>&1 &
watchdog=$!
for _ in $(seq 1 200); do grep -q '"step":6' m.jsonl 2>/dev/null && break; sleep 0.05; done
worker=$(pgrep -P $agent -f "dtrun worker" | head -1)
[ -n "$worker" ] || fail "no worker found"
kill -9 "$worker"
wait $agent; rc=$?
kill $watchdog 2>/dev/null
[ "$rc" -eq 0 ] || fail "the run exited $rc: $(tail -3 err)"

python3 - m.jsonl <<'PY' && ok "two attempts, marked; steps thinned by log.every" || fail "metrics file: $(cat m.jsonl)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
starts = [r for r in rows if r.get("event") == "attempt_start"]
assert [s["attempt"] for s in starts] == [0, 1], starts
assert "restart_reason" not in starts[0] and starts[0]["from_step"] == 0, starts[0]
assert "killed by SIGKILL" in starts[1]["restart_reason"], starts[1]
resumed = starts[1]["from_step"]
assert resumed >= 4 and resumed % 2 == 0, starts[1]
steps = [r for r in rows if "loss" in r]
assert all("attempt" in r for r in rows if "step" in r), rows
first = [r["step"] for r in steps if r["attempt"] == 0]
second = [r["step"] for r in steps if r["attempt"] == 1]
assert all(s % 2 == 0 for s in first) and first[:3] == [2, 4, 6], first
assert second == list(range(resumed + 2, 11, 2)) + [11], (second, resumed)
# the second attempt's records come after its start record
assert rows.index(starts[1]) < rows.index([r for r in steps if r["attempt"] == 1][0])
PY
grep -q '^\[default/0\]:step 11/11' out && ! grep -q 'step 3/11' out && ok "the console is thinned the same way" ||
  fail "console: $(grep step out | head -5)"
finish
