#!/usr/bin/env bash
# Retention never deletes the checkpoint a run was pinned to (issue 15, point
# 4): a run resumed with checkpoint.resume: DIR/step_000002 and keep 1 saves
# steps 3 and 4 in the same directory; step 2 must survive, so that the run
# started again (what a restart does) loads it again and finishes, exit 0.
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
[ "$rc" -eq 0 ] && grep -q "resuming from $T/ck/step_000002" "$T/b2.err" && ok "started again, it resumes from the pin" ||
  fail "started again: exit $rc: $(tail -2 "$T/b2.err")"
finish
