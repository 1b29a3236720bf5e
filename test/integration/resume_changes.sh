#!/usr/bin/env bash
# A resume says what it does (issue 25, item 2). The checkpoint records the job
# it was trained with; a relaunch compares it with the job file now:
#  - train.lr changed: refused before any worker starts, one line naming
#    "train.lr 0.01 -> 0.02" and both overrides, exit 6, nothing written;
#  - with --allow-changes=train.lr (or checkpoint.allow_changes: [train.lr])
#    it resumes, and the resume line lists every change, train.steps growing
#    and the layout (dp 1 -> 2) among them;
#  - a finished run launched again says so in one line on stdout, exit 0, and
#    changes nothing: the metrics file byte for byte, the checkpoints, the
#    TensorBoard folder; the same through `dtrun worker` (no launcher);
#  - a misspelt key in either override is one line with a did-you-mean.
source "$(dirname "$0")/../helpers/preflight.bash"
cd "$T" || exit 1

tiny_job job.yaml "checkpoint: {dir: ck, every: 2}" "log: {metrics: m.jsonl, tensorboard: tb}"
run_dtrun first job.yaml
[ "$rc" -eq 0 ] && [ "$(cat ck/latest)" = step_000004 ] || fail "first run: exit $rc: $(tail -2 "$T/first.err")"

# state: what must not change when a launch is refused or finds nothing to do
state() { { find ck tb -printf '%p %s %T@\n' | sort; sha256sum m.jsonl; } >"$T/$1.state"; }

# a new learning rate (and more steps): refused, nothing touched
sed -i 's/lr: 0.01/lr: 0.02/; s/steps: 4/steps: 6/' job.yaml
state before
run_dtrun lr job.yaml
expect_one_line lr 6 "dtrun: job.yaml: cannot resume from ck/step_000004: train.lr 0.01 -> 0.02 makes another run" \
  "--allow-changes=train.lr" "checkpoint.allow_changes: [train.lr]"
state after
cmp -s "$T/before.state" "$T/after.state" && ok "the refused launch wrote nothing" || fail "the refused launch changed files"

# the override: it resumes and says what changed, the layout too (2 workers)
sed -i 's/^train: {/parallel: {dp: 2}\ntrain: {/' job.yaml
run_dtrun allowed --allow-changes=train.lr --nproc-per-node=2 job.yaml
[ "$rc" -eq 0 ] || fail "with --allow-changes: exit $rc: $(tail -3 "$T/allowed.err")"
line=$(grep 'resuming from' "$T/allowed.out")
[[ $line == *"resuming from ck/step_000004: step 4 "*"changed since: train.steps 4 -> 6, train.micro_batch 4 -> 2, train.lr 0.01 -> 0.02 (allowed), train.min_lr 0.001 -> 0.002 (follows train.lr), parallel.dp 1 -> 2" ]] &&
  ok "resumed, one line: ${line#*dtrun: }" || fail "resume line: $line"
grep -q '"step":6,' m.jsonl && ok "it trained on to step 6" || fail "no step 6 in the metrics"
sed -i '/^parallel: {dp: 2}$/d' job.yaml

# the key in the job file does the same
sed -i 's/lr: 0.02/lr: 0.03/; s/steps: 6/steps: 8/; s/every: 2}/every: 2, allow_changes: [train.lr]}/' job.yaml
run_dtrun key job.yaml
[ "$rc" -eq 0 ] && grep -q "train.lr 0.02 -> 0.03 (allowed)" "$T/key.out" && ok "checkpoint.allow_changes: [train.lr] resumes too" ||
  fail "with the key: exit $rc: $(tail -2 "$T/key.err") $(grep resuming "$T/key.out")"

# another seed is another run as well (the data order); the refusal names it
sed -i 's/lr: 0.03}/lr: 0.03, seed: 7}/; s/steps: 8/steps: 10/' job.yaml
run_dtrun seed job.yaml
expect_one_line seed 6 "dtrun: job.yaml: cannot resume from ck/step_000008: train.seed 1337 -> 7" "--allow-changes=train.seed"
sed -i 's/, seed: 7//; s/steps: 10/steps: 8/' job.yaml

# a finished run, launched again: one line on stdout, exit 0, nothing written
state before
run_dtrun again job.yaml
[ "$rc" -eq 0 ] && [ ! -s "$T/again.err" ] && [ "$(wc -l <"$T/again.out")" -eq 1 ] &&
  grep -q "^dtrun: job.yaml: the run is finished: ck/step_000008 holds step 8, the last of train.steps 8; nothing to do" "$T/again.out" &&
  ok "finished: $(cat "$T/again.out")" || fail "finished run: exit $rc: $(cat "$T/again.out" "$T/again.err")"
state after
cmp -s "$T/before.state" "$T/after.state" && ok "metrics file byte-identical, checkpoints and TensorBoard untouched" ||
  fail "the finished run changed files: $(diff "$T/before.state" "$T/after.state")"
# the worker alone (no launcher to check first) does the same
timeout 20 "$DTRUN" worker job.yaml >"$T/worker.out" 2>"$T/worker.err"; rc=$?
state after2
[ "$rc" -eq 0 ] && grep -q "the run is finished" "$T/worker.out" && [ ! -s "$T/worker.err" ] &&
  cmp -s "$T/before.state" "$T/after2.state" && ok "dtrun worker: finished, nothing written" ||
  fail "dtrun worker on a finished run: exit $rc: $(cat "$T/worker.out" "$T/worker.err")"
# and the worker refuses what the launcher refuses
sed -i 's/lr: 0.03/lr: 0.04/; s/steps: 8/steps: 9/; s/, allow_changes: \[train.lr\]//' job.yaml
timeout 20 "$DTRUN" worker job.yaml >"$T/wlr.out" 2>"$T/wlr.err"; rc=$?
[ "$rc" -eq 6 ] && grep -q "cannot resume from ck/step_000008: train.lr 0.03 -> 0.04 makes another run" "$T/wlr.err" &&
  ok "dtrun worker refuses the new lr too (exit 6)" || fail "dtrun worker, new lr: exit $rc: $(cat "$T/wlr.err")"

# misspelt overrides
run_dtrun typo --allow-changes=train.lrr job.yaml
expect_one_line typo 2 "dtrun: --allow-changes: 'train.lrr' is not a job key" "did you mean 'train.lr'?"
tiny_job typo.yaml "checkpoint: {dir: ck2, allow_changes: [train.sed]}"
run_dtrun typokey typo.yaml
expect_one_line typokey 2 "dtrun: typo.yaml:3:" "'train.sed' is not a job key" "did you mean 'train.seed'?"
finish
