#!/usr/bin/env bash
# Faults around checkpoints, through the real launcher and trainer (tiny GPT,
# dp=2 x tp=2, 60 steps; the uninterrupted run is the reference):
#  a. kill -9 of a random worker at a random step, 5 times, --max-restarts=5:
#     the agent restarts the group, the workers resume from `latest`, the run
#     completes and its final parameters are the uninterrupted run's, bitwise;
#  b. SIGKILL of a worker while a checkpoint is being written (the write held
#     open by DTRUN_TEST_CKPT_DELAY_MS): `latest` still names the previous step,
#     which loads (export, resume), and the resumed run ends on the reference;
#  c. SIGUSR1 to dtrun: the workers save at the next step boundary and exit 0,
#     dtrun exits 0; SIGTERM: the same save, dtrun exits 143 (a stopped job);
#     the run resumed after both ends on the reference;
#  d. a corrupted shard: resume and export fail with exit 6 and one line naming
#     the file ("checksum mismatch (corrupted shard)");
#  e. a non-finite loss: exit 5 with a line naming the step and the ranks; with
#     train.skip_nonfinite the step is skipped and the run finishes;
#  f. a full disk (a small tmpfs, needs root) while saving: exit 6, the line says
#     the previous checkpoint is intact, and it is.
source "$(dirname "$0")/../parallel/ckpt.bash"
STEPS=60
LAY="dp=2 tp=2"
PIDS_OF() { pgrep -f "dtrun worker $1" || true; }

# the reference and the job every part runs (only checkpoint.every differs)
job() { # NAME EVERY -> $T/NAME.yaml, metrics $T/NAME.jsonl, checkpoints $T/NAME.ck
  ckpt_job gpt-tiny "$LAY" "$T/$1.yaml" "$T/$1.jsonl" "$T/$1.ck"
  printf '  every: %s\n' "$2" >>"$T/$1.yaml"
}
job ref 0
ckpt_run "$LAY" "$T/ref.yaml" "$T/ref.log" DTRUN_DUMP_PARAMS="$T/ref.bin" || { tail "$T/ref.log"; fail "reference run"; }

rank_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^RANK=//p'; }

# start NAME DTRUN-ARGS... (env from the caller): dtrun in the background as
# $AGENT (dtrun itself, so signals reach it), with a watchdog so nothing hangs
start() {
  local name=$1; shift
  "$DTRUN" --nproc-per-node=4 "$@" "$T/$name.yaml" >"$T/$name.out" 2>"$T/$name.err" &
  AGENT=$!
  ( sleep 120 && kill -9 $AGENT ) >/dev/null 2>&1 &
  WATCHDOG=$!
}
# finish: waits for $AGENT, sets RC, stops the watchdog
finish() {
  wait $AGENT; RC=$?
  pkill -P $WATCHDOG 2>/dev/null; kill $WATCHDOG 2>/dev/null; wait $WATCHDOG 2>/dev/null
  return 0
}

# ---- a. kill -9, five times ----
job kill 3
DTRUN_TEST_STEP_DELAY_MS=80 DTRUN_DUMP_PARAMS="$T/kill.bin" start kill --max-restarts=5
at=0
for k in 1 2 3 4 5; do
  target=$((at + 1 + RANDOM % 5))
  wait_step "$T/kill.jsonl" $target 30 || { tail "$T/kill.err"; fail "kill $k: step $target not reached"; }
  mapfile -t pids < <(PIDS_OF "$T/kill.yaml")
  [ ${#pids[@]} = 4 ] || fail "kill $k: ${#pids[@]} workers, want 4"
  victim=${pids[RANDOM % 4]}
  at=$(last_step "$T/kill.jsonl")
  echo "kill $k: rank $(rank_of $victim) (pid $victim) after step $at"
  kill -9 "$victim"
  for ((i = 0; i < 400; i++)); do grep -q "restart $k of 5" "$T/kill.err" && break; sleep 0.05; done
  grep -q "restart $k of 5" "$T/kill.err" || { tail "$T/kill.err"; fail "kill $k: no restart"; }
done
finish; rc=$RC
[ $rc = 0 ] || { tail -20 "$T/kill.err"; fail "a: dtrun exited $rc after 5 kills with --max-restarts=5"; }
[ "$(grep -c 'killed by SIGKILL' "$T/kill.err")" = 5 ] || fail "a: want 5 root causes naming SIGKILL"
resumes=$(grep -c '^\[default/0]:dtrun: resuming from' "$T/kill.out")
cmp -s "$T/ref.bin" "$T/kill.bin" || fail "a: final parameters differ from the uninterrupted run"
echo "ok a: 5 kills, 5 restarts, $resumes resumes from latest, final parameters bitwise equal to the uninterrupted run"

# ---- b. SIGKILL while step 20 is being written ----
job write 10
DTRUN_TEST_CKPT_DELAY_MS=3000 DTRUN_TEST_CKPT_DELAY_STEP=20 start write
for ((i = 0; i < 400; i++)); do
  [ "$(ls "$T/write.ck/step_000020/"rank_*.safetensors 2>/dev/null | wc -l)" = 4 ] && break; sleep 0.05
done
[ -f "$T/write.ck/step_000020/rank_00003.safetensors" ] || { tail "$T/write.err"; fail "b: step 20 not being written"; }
mapfile -t pids < <(PIDS_OF "$T/write.yaml")
victim=${pids[RANDOM % ${#pids[@]}]}
echo "b: kill -9 rank $(rank_of $victim) while step 20 is written"
kill -9 "$victim"
finish; rc=$RC
[ $rc = 137 ] || { tail "$T/write.err"; fail "b: dtrun exited $rc, want 137"; }
[ "$(cat "$T/write.ck/latest")" = step_000010 ] || fail "b: latest is $(cat "$T/write.ck/latest"), want step_000010"
[ ! -e "$T/write.ck/step_000020/index.json" ] || fail "b: the interrupted step 20 looks committed"
"$DTRUN" export "$T/write.ck" "$T/write.safetensors" 2>"$T/write.export" &&
  grep -q "step_000010 (step 10)" "$T/write.export" || { cat "$T/write.export"; fail "b: the previous checkpoint does not load"; }
ckpt_run "$LAY" "$T/write.yaml" "$T/write2.log" DTRUN_DUMP_PARAMS="$T/write.bin" || { tail "$T/write2.log"; fail "b: resume"; }
grep -q "resuming from $T/write.ck/step_000010: step 10" "$T/write2.log" || fail "b: did not resume from step 10"
cmp -s "$T/ref.bin" "$T/write.bin" || fail "b: final parameters differ from the uninterrupted run"
echo "ok b: killed mid-write, latest stayed step 10, it loaded and the resumed run equals the reference"

# ---- c. SIGUSR1, then SIGTERM, then the rest ----
job sig 0
DTRUN_TEST_STEP_DELAY_MS=40 start sig
wait_step "$T/sig.jsonl" 10 30 || fail "c: step 10 not reached"
kill -USR1 $AGENT
finish; rc=$RC
[ $rc = 0 ] || { tail "$T/sig.err"; fail "c: dtrun exited $rc after SIGUSR1, want 0"; }
s1=$(sed -n 's/.*SIGUSR1: stopped at step \([0-9]*\) with a checkpoint.*/\1/p' "$T/sig.out")
[ -n "$s1" ] && [ "$s1" -lt $STEPS ] || { tail "$T/sig.err"; fail "c: no 'SIGUSR1: stopped at step' line"; }
[ "$(cat "$T/sig.ck/latest")" = "$(printf 'step_%06d' "$s1")" ] || fail "c: latest is not step $s1"
DTRUN_TEST_STEP_DELAY_MS=40 start sig
wait_step "$T/sig.jsonl" $((s1 + 5)) 30 || fail "c: step $((s1 + 5)) not reached after resuming"
kill -TERM $AGENT
finish; rc=$RC
[ $rc = 143 ] || { tail "$T/sig.err"; fail "c: dtrun exited $rc after SIGTERM, want 143"; }
s2=$(sed -n 's/.*SIGTERM: stopped at step \([0-9]*\) with a checkpoint.*/\1/p' "$T/sig.out")
[ -n "$s2" ] && [ "$s2" -gt "$s1" ] || { tail "$T/sig.err"; fail "c: no 'SIGTERM: stopped at step' line"; }
! grep -q "root cause" "$T/sig.err" || fail "c: a clean stop reported a failure"
ckpt_run "$LAY" "$T/sig.yaml" "$T/sig3.log" DTRUN_DUMP_PARAMS="$T/sig.bin" || { tail "$T/sig3.log"; fail "c: resume"; }
grep -q "resuming from $T/sig.ck/$(printf 'step_%06d' "$s2"): step $s2" "$T/sig3.log" || fail "c: not resumed from $s2"
cmp -s "$T/ref.bin" "$T/sig.bin" || fail "c: final parameters differ from the uninterrupted run"
echo "ok c: SIGUSR1 -> checkpoint at step $s1, exit 0; SIGTERM -> checkpoint at step $s2, exit 143; resumed run equals the reference"

# ---- d. a corrupted shard ----
cp -r "$T/sig.ck" "$T/bad.ck"
shard="$T/bad.ck/step_000060/rank_00001.safetensors"
size=$(stat -c %s "$shard")
printf '\x5a' | dd of="$shard" bs=1 seek=$((size / 2)) conv=notrunc status=none
job bad 0
# more steps than the checkpoint holds: at its last step the run would be finished, nothing read
sed -i -e "s|^  dir: .*|  dir: $T/bad.ck|" -e "s/^  steps: .*/  steps: $((STEPS + 10))/" "$T/bad.yaml"
ckpt_run "$LAY" "$T/bad.yaml" "$T/bad.log"; rc=$?
grep "dtrun: rank" "$T/bad.log" | head -2
[ $rc = 6 ] || { tail "$T/bad.log"; fail "d: resuming from a corrupted shard exited $rc, want 6"; }
grep -q "cannot resume: $shard: checksum mismatch (corrupted shard)" "$T/bad.log" || { tail "$T/bad.log"; fail "d: no line naming the shard"; }
"$DTRUN" export "$T/bad.ck" "$T/bad.safetensors" 2>"$T/bad.export"; rc=$?
[ $rc = 6 ] && grep -q "$shard: checksum mismatch" "$T/bad.export" || fail "d: export of a corrupted shard: exit $rc"
echo "ok d: corrupted shard -> exit 6: $(grep -o 'rank_00001.safetensors: checksum mismatch[^;]*' "$T/bad.log" | head -1)"

# ---- e. non-finite loss ----
job nan 0
sed -i -e 's/^  lr: .*/  lr: 1.0e30/' -e "/^checkpoint:/,\$d" "$T/nan.yaml"
ckpt_run "$LAY" "$T/nan.yaml" "$T/nan.log"; rc=$?
[ $rc = 5 ] || { tail "$T/nan.log"; fail "e: a diverging run exited $rc, want 5"; }
line=$(grep -o "step [0-9]*: the loss is [a-z-]* (non-finite on rank [0-9, ]*): stopping.*" "$T/nan.log" | head -1)
[ -n "$line" ] || { tail "$T/nan.log"; fail "e: no report naming the step and the ranks"; }
echo "ok e: lr 1e30 -> exit 5: $line"
job skip 0
sed -i -e "/^checkpoint:/,\$d" -e 's/^  steps: .*/  steps: 10/' "$T/skip.yaml"
sed -i -e 's/^train:/train:\n  skip_nonfinite: true/' "$T/skip.yaml"
ckpt_run "$LAY" "$T/skip.yaml" "$T/skip.log" DTRUN_TEST_NAN_STEP=5 || { tail "$T/skip.log"; fail "e: skip_nonfinite run failed"; }
grep -q "step 5: the loss is nan .*skipping the step" "$T/skip.log" || fail "e: no skip line"
python3 - "$T/skip.jsonl" <<'EOF' || fail "e: step 5 should be skipped, the others logged"
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if '"loss"' in l]
assert steps == [1, 2, 3, 4, 6, 7, 8, 9, 10], steps
EOF
echo "ok e: skip_nonfinite skips step 5 and finishes"

# ---- f. a full disk while saving ----
mnt=$T/full
mkdir -p "$mnt"
step_bytes=$(du -sb "$T/ref.ck/step_000060" | cut -f1)
if mount -t tmpfs -o size=$(( (step_bytes * 5 / 2 + 4095) / 4096 * 4096 )) tmpfs "$mnt" 2>/dev/null; then
  job full 5
  sed -i -e "s|^  dir: .*|  dir: $mnt/ck|" -e 's/^  keep: .*/  keep: 2/' "$T/full.yaml"
  ckpt_run "$LAY" "$T/full.yaml" "$T/full.log"; rc=$?
  ok=1
  [ $rc = 6 ] || { tail "$T/full.log"; ok=0; echo "FAIL: f: a full disk exited $rc, want 6"; }
  grep -q "No space left on device.*the previous checkpoint (step 10 in $mnt/ck) is intact" "$T/full.log" ||
    { grep dtrun: "$T/full.log" | tail -5; ok=0; echo "FAIL: f: no line saying the previous checkpoint is intact"; }
  "$DTRUN" export "$mnt/ck" "$T/full.safetensors" 2>"$T/full.export" && grep -q "step_000010 (step 10)" "$T/full.export" ||
    { cat "$T/full.export"; ok=0; echo "FAIL: f: the previous checkpoint does not load"; }
  [ -z "$(find "$mnt" -name '*.tmp')" ] || { ok=0; echo "FAIL: f: .tmp files left behind"; }
  grep "dtrun: rank" "$T/full.log" | head -4
  umount "$mnt"
  [ $ok = 1 ] || exit 1
  echo "ok f: full disk at step 15 -> exit 6, step 10 intact and loadable"
else
  echo "skip f: cannot mount a tmpfs here (needs root)"
fi
echo "ok: checkpoint faults"
