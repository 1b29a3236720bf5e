#!/usr/bin/env bash
# Token data that is bad or changes while a run reads it (issue 26, item 2).
# Before: a file rewritten in place with 0xFFFF (same size) trained on, the
# embedding reading outside its table (loss -42, exit 0). Now:
#  - a token id past model.vocab_size stops the run where a batch reaches it:
#    exit 3, one line naming the file, the token's position, the id and the
#    vocabulary, and a checkpoint of the last whole step, from which the same
#    command resumes once the file is mended;
#  - a same-size rewrite in place (valid ids, another mtime) stops at the next
#    step boundary the same way, on every rank;
#  - the issue's case, 0xFFFF written over the tokens mid-run, stops with exit 3
#    and a saved step (by whichever check sees it first);
#  - a new file renamed over the data is no change: the run reads the file it
#    opened and ends normally.
source "$(dirname "$0")/../helpers/preflight.bash"
cd "$T" || exit 1
# the run's own lines (steps, saves, resuming) are on stdout, errors on stderr: both, in order of the files
both() { cat "$1.out" "$1.err" 2>/dev/null; }

# shard FILE N [BAD_POS]: an llm.c shard of N tokens t_p = p % 200, token
# BAD_POS (if given) 65535.
shard() {
  python3 - "$@" <<'EOF'
import struct, sys
path, n = sys.argv[1], int(sys.argv[2])
bad = int(sys.argv[3]) if len(sys.argv) > 3 else -1
toks = [65535 if p == bad else p % 200 for p in range(n)]
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *toks))
EOF
}
# rewrite FILE WORD: every token of FILE becomes WORD, in place (same inode, same size).
rewrite() {
  python3 - "$@" <<'EOF'
import os, sys
path, word = sys.argv[1], int(sys.argv[2])
n = (os.path.getsize(path) - 1024) // 2
with open(path, "r+b") as f:
    f.seek(1024)
    f.write(word.to_bytes(2, "little") * n)
EOF
}
# job FILE DATA STEPS [EXTRA-YAML...]: a tiny GPT over byte-sized token ids.
job() {
  local f=$1 data=$2 steps=$3; shift 3
  tiny_job "$f" "data: {kind: tokens, train: $data}" "checkpoint: {dir: ck_${f%.yaml}}" "$@"
  sed -i "s/vocab_size: 32/vocab_size: 256/; s/steps: 4/steps: $steps/" "$f"
}
# saved_step NAME: the step of the checkpoint the stop line names, if it is ck's latest.
saved_step() {
  local line step
  line=$(both "$T/$1" | grep "step [0-9]* saved to ck_$1" | head -1)
  step=$(sed -n 's/.*step \([0-9]*\) saved to ck_.*/\1/p' <<<"$line")
  [ -n "$step" ] && [ "$(sed 's/step_0*//' "ck_$1/latest" 2>/dev/null)" = "${step:-x}" ] && echo "$step"
}

# 1. An id past the vocabulary at token 1100 of a 2000-token shard: the run
#    trains until a batch reaches it (where, depends on the seed only).
shard bad.bin 2000 1100
job ids.yaml bad.bin 400
run_dtrun ids ids.yaml
line=$(grep "^\[default/0\]:dtrun: rank 0: .*out of the model's vocabulary" ids.err)
step=$(saved_step ids)
[ "$rc" -eq 3 ] && ok "an id past the vocabulary: exit 3" || fail "exit $rc, expected 3: $(tail -3 ids.err)"
[ "$(grep -c "^\[default/0\]:dtrun: rank 0: .*out of the model's vocabulary" ids.err)" -eq 1 ] &&
  [[ $line == *"bad.bin: token id 65535 at token 1100 of the file is out of the model's vocabulary (model.vocab_size 256)"* ]] &&
  ok "one line: ${line#*]:}" || fail "no line naming file, position, id and vocab: $(tail -5 ids.err)"
[ -n "$step" ] && [ "$step" -ge 1 ] && ok "the last whole step ($step) saved" ||
  fail "no checkpoint of the last whole step: $(tail -3 ids.err)"
shard bad.bin 2000 # mended
run_dtrun ids_resume ids.yaml
[ "$rc" -eq 0 ] && both ids_resume | grep -q "resuming from ck_ids/step_0*$step: step $step" &&
  ok "the same command resumes from step $step once the file is mended" ||
  fail "resume: exit $rc: $(both ids_resume | tail -3)"

# 2. A same-size rewrite in place with valid ids, on 2 ranks, at step 5 or later.
shard data.bin 200000
touch -d 2000-01-01 data.bin # an mtime the rewrite cannot share
job rw.yaml data.bin 400 "parallel: {dp: 2}"
DTRUN_TEST_STEP_DELAY_MS=50 timeout -k 2 60 "$DTRUN" --nproc-per-node=2 rw.yaml >rw.out 2>rw.err &
agent=$!
for _ in $(seq 1 400); do both rw | grep -q 'step 5/400' && break; sleep 0.05; done
rewrite data.bin 7
wait $agent; rc=$?
line=$(grep "rewritten in place" rw.err | head -1)
step=$(saved_step rw)
[ "$rc" -eq 3 ] && ok "a same-size rewrite: exit 3" || fail "exit $rc, expected 3: $(tail -3 rw.err)"
[[ $line == *"data.bin: the data file changed while the run read it: rewritten in place (401024 bytes, modified 2000-01-01 00:00:00 when opened,"* ]] &&
  ok "one line: ${line#*]:}" || fail "no line saying the file was rewritten in place: $(tail -5 rw.err)"
[ -n "$step" ] && [ "$step" -ge 5 ] && [ "$step" -lt 400 ] && ok "step $step saved" ||
  fail "no checkpoint of the last whole step: $(tail -3 rw.err)"
DTRUN_TEST_STEP_DELAY_MS=0 run_dtrun rw_resume --nproc-per-node=2 rw.yaml
[ "$rc" -eq 0 ] && both rw_resume | grep -q "resuming from ck_rw/step_0*$step: step $step" &&
  ok "the same command resumes from step $step" || fail "resume: exit $rc: $(both rw_resume | tail -3)"

# 3. The issue's probe: 0xFFFF over every token, same size, mid-run.
shard data3.bin 200000
job ff.yaml data3.bin 400
DTRUN_TEST_STEP_DELAY_MS=50 timeout -k 2 60 "$DTRUN" ff.yaml >ff.out 2>ff.err &
agent=$!
for _ in $(seq 1 400); do both ff | grep -q 'step 5/400' && break; sleep 0.05; done
rewrite data3.bin 65535
wait $agent; rc=$?
step=$(saved_step ff)
[ "$rc" -eq 3 ] && [ -n "$step" ] && [ "$step" -ge 5 ] && [ "$step" -lt 400 ] &&
  grep -qE "data3.bin: (token id 65535 at token [0-9]+ of the file is out of the model's vocabulary|the data file changed while the run read it)" ff.err &&
  ok "0xFFFF written over the tokens mid-run: exit 3, step $step saved: $(grep -oE "data3.bin: [^;]*" ff.err | head -1)" ||
  fail "0xFFFF mid-run: exit $rc: $(tail -3 ff.err)"
! both ff | grep -q "loss -" || fail "a negative loss was logged"

# 4. A new file renamed over the data mid-run: the run keeps what it opened.
shard data4.bin 200000
job mv.yaml data4.bin 40
DTRUN_TEST_STEP_DELAY_MS=20 timeout -k 2 60 "$DTRUN" mv.yaml >mv.out 2>mv.err &
agent=$!
for _ in $(seq 1 400); do both mv | grep -q 'step 5/40' && break; sleep 0.05; done
shard data4.new 200000 && mv data4.new data4.bin
wait $agent; rc=$?
[ "$rc" -eq 0 ] && ! grep -q "changed while the run read it" mv.err && ok "a file renamed over the data: the run ends normally" ||
  fail "rename over the data: exit $rc: $(tail -3 mv.err)"
finish
