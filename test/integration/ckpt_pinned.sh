#!/usr/bin/env bash
# Retention never deletes the checkpoint a run was pinned to (issue 15, point
# 4): a run resumed with checkpoint.resume: DIR/step_000002 and keep 1 saves
# steps 3 and 4 in the same directory; step 2 must survive, so that the run
# started again (a new launch) loads it again and finishes, exit 0.
#
# A restart after a pinned resume goes on from the run's own latest (issue 26,
# item 1): a worker killed with -9 well past the pin (--max-restarts=1) is
# restarted from the last step it saved, not from the pin; and a restart whose
# run saved nothing yet does not take another run's later checkpoint for its
# own: it starts from the pin again.
source "$(dirname "$0")/../helpers/preflight.bash"

tiny_job "$T/a.yaml" "checkpoint: {dir: $T/ck, every: 1, keep: 1}"
sed -i 's/steps: 4/steps: 2/' "$T/a.yaml"
run_dtrun a "$T/a.yaml"
[ "$rc" -eq 0 ] && [ -f "$T/ck/step_000002/index.json" ] || fail "first run: exit $rc: $(tail -2 "$T/a.err")"

tiny_job "$T/b.yaml" "checkpoint: {dir: $T/ck, every: 1, keep: 1, resume: $T/ck/step_000002}"
run_dtrun b1 "$T/b.yaml"
[ "$rc" -eq 0 ] || fail "pinned run: exit $rc: $(tail -2 "$T/b1.err")"
[ -f "$T/ck/step_000002/index.json" ] && ok "keep 1 kept the pinned step_000002 beside $(cat "$T/ck/latest")" ||
  fail "retention deleted the pinned step_000002 (left: $(ls "$T/ck" | tr '\n' ' '))"
[ -f "$T/ck/step_000004/index.json" ] && [ ! -e "$T/ck/step_000003" ] && ok "keep 1 still pruned step_000003" ||
  fail "retention: left $(ls "$T/ck" | tr '\n' ' ')"
run_dtrun b2 "$T/b.yaml"
[ "$rc" -eq 0 ] && grep -q "resuming from $T/ck/step_000002" "$T/b2.out" && ok "started again, it resumes from the pin" ||
  fail "started again: exit $rc: $(tail -2 "$T/b2.err")"

# start NAME ARGS...: dtrun in the background ($agent), stdout NAME.out, stderr NAME.err
start() {
  local name=$1; shift
  "$DTRUN" "$@" >"$T/$name.out" 2>"$T/$name.err" &
  agent=$!
  ( sleep 60 && kill -9 $agent ) >/dev/null 2>&1 &
  watchdog=$!
}
# kill_worker_after METRICS STEP: kill -9 the worker once METRICS has STEP's record
kill_worker_after() {
  local i worker
  for ((i = 0; i < 600; i++)); do grep -q "\"step\":$2," "$1" 2>/dev/null && break; sleep 0.05; done
  worker=$(pgrep -P $agent -f "dtrun worker" | head -1)
  [ -n "$worker" ] || { fail "no worker to kill"; return 1; }
  kill -9 "$worker"
}
# NAME.all: the run's lines (stdout; a dtrun before the streams split wrote them to stderr)
stop() { wait $agent; rc=$?; kill $watchdog 2>/dev/null; wait $watchdog 2>/dev/null; cat "$T/$1.out" "$T/$1.err" >"$T/$1.all"; }

# the pin: step 2 of a run stopped there
tiny_job "$T/p0.yaml" "checkpoint: {dir: $T/pk, every: 1}"
sed -i 's/steps: 4/steps: 40/' "$T/p0.yaml"
DTRUN_TEST_STOP_STEP=2 run_dtrun p0 "$T/p0.yaml"
[ "$rc" -eq 0 ] && [ -f "$T/pk/step_000002/index.json" ] || fail "pin run: exit $rc: $(tail -2 "$T/p0.err")"

tiny_job "$T/p.yaml" "checkpoint: {dir: $T/pk, every: 5, keep: 2, resume: $T/pk/step_000002}" "log: {metrics: $T/p.jsonl}"
sed -i 's/steps: 4/steps: 40/' "$T/p.yaml"
DTRUN_TEST_STEP_DELAY_MS=60 start p1 --max-restarts=1 "$T/p.yaml"
kill_worker_after "$T/p.jsonl" 17
stop p1
# the last save of the first attempt (before the second "resuming from")
latest=$(grep '^\[default/0\]:' "$T/p1.all" | awk '/resuming from/ { n++ } n == 1 && /checkpoint step [0-9]+ saved/ { s = $0 } END { print s }' |
  sed 's/.*checkpoint step \([0-9]*\) saved.*/\1/')
latest=${latest:-0}
resumes=$(grep '^\[default/0\]:dtrun: resuming from' "$T/p1.all" | grep -o 'resuming from [^:]*: step [0-9]*' | sed 's/.*step //' | tr '\n' ' ')
[ "$rc" -eq 0 ] || fail "pinned run with a kill: exit $rc: $(tail -3 "$T/p1.err")"
[ "$latest" -ge 15 ] && [ "$resumes" = "2 $latest " ] &&
  grep -q "step_$(printf %06d $latest): step $latest .*this run's latest, past its pin $T/pk/step_000002 (restart 1)" "$T/p1.all" &&
  ok "killed past step $latest (saved), the restart resumed from step $latest, not the pin (resumes: $resumes)" ||
  fail "restart after a pinned resume: resumes from steps '$resumes', last save before the kill $latest: $(grep resuming "$T/p1.all")"
python3 - "$T/p.jsonl" "$latest" <<'PY' && ok "the metrics' second attempt starts at step $latest" || fail "metrics: $(grep attempt_start "$T/p.jsonl")"
import json, sys
starts = [r for r in map(json.loads, open(sys.argv[1])) if r.get("event") == "attempt_start"]
assert [(s["attempt"], s["from_step"]) for s in starts] == [(0, 2), (1, int(sys.argv[2]))], starts
PY
[ -f "$T/pk/step_000002/index.json" ] && ok "the pin is still there" || fail "retention deleted the pin"

# another launch of the same pinned job saves nothing before its kill (every
# 1000): pk's latest is the first launch's (another run id), so the restart
# starts from the pin again
sed -i 's/every: 5/every: 1000/' "$T/p.yaml"
rm -f "$T/p.jsonl"
DTRUN_TEST_STEP_DELAY_MS=60 start p2 --max-restarts=1 "$T/p.yaml"
kill_worker_after "$T/p.jsonl" 6
stop p2
resumes=$(grep '^\[default/0\]:dtrun: resuming from' "$T/p2.all" | grep -o 'resuming from [^:]*: step [0-9]*' | sed 's/.*step //' | tr '\n' ' ')
[ "$rc" -eq 0 ] && [ "$resumes" = "2 2 " ] && ok "a restart with no save of its own starts from the pin again, not from another run's step $(cat "$T/pk/latest")" ||
  fail "second launch: exit $rc, resumes from '$resumes': $(grep resuming "$T/p2.all")"
finish
