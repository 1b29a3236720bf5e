#!/usr/bin/env bash
# Words (issue 26.6): lines that say what happened, in correct English.
#  - a checkpoint of another model: the "cannot resume" line suggests only a
#    step directory that holds the job's model (an older step of the same run
#    has the same mismatch: then only "never"), and the one it names resumes;
#  - counts of one are singular: tokenize's "1 document", inspect's "1 rank",
#    the world check's "= 1 worker", the daemon's "1 node" / "1 key";
#  - a metrics file's bad line: "holds one per line", not "one a line".
# (The hang's numbering and restart reason: launch_hung_rank.sh.)
source "$(dirname "$0")/../helpers/preflight.bash"
REPO=$PWD
cd "$T" || exit 1

# 1. Resume hints.
tiny_job a.yaml "checkpoint: {dir: ck, every: 2}"
run_dtrun a a.yaml
[ "$rc" = 0 ] || fail "a: exit $rc: $(tail -2 a.err)"
sed 's/d_model: 16/d_model: 32/' a.yaml >b.yaml
run_dtrun b b.yaml
expect_one_line b 6 "dtrun: b.yaml: cannot resume: ck/step_000004: the checkpoint's model has d_model 16 but the job's has 32" \
  "; to start otherwise, set checkpoint.resume to never"
grep -q "older step\|step_000002" b.err && fail "b: suggests a step directory of the same (other) model: $(cat b.err)"
# ck2: the job's model at step 2 (copied from ck), another model at step 4.
sed 's/dir: ck,/dir: ck2,/' b.yaml >b2.yaml
run_dtrun b2 b2.yaml # the d_model 32 job: steps 2 and 4 in ck2
[ "$rc" = 0 ] || fail "b2: exit $rc: $(tail -2 b2.err)"
rm -rf ck2/step_000002 && cp -r ck/step_000002 ck2/ || fail "cannot copy step 2"
sed 's/dir: ck,/dir: ck2,/' a.yaml >a2.yaml
run_dtrun a2 a2.yaml
expect_one_line a2 6 "dtrun: a2.yaml: cannot resume: ck2/step_000004: the checkpoint's model has d_model 32 but the job's has 16" \
  "; to start otherwise, set checkpoint.resume to never, or to ck2/step_000002 (the newest other checkpoint of this model)"
sed 's|dir: ck2,|dir: ck2, resume: ck2/step_000002,|' a2.yaml >a3.yaml
run_dtrun a3 a3.yaml
[ "$rc" = 0 ] || fail "a3: the step the hint named does not resume: exit $rc: $(tail -2 a3.err)"
# (the run's own lines are on stdout, since the streams change)
cat a3.out a3.err | grep -q "resuming from ck2/step_000002" && ok "the step the hint names resumes" ||
  fail "a3: $(cat a3.out a3.err)"

# 2. Counts of one.
printf 'hello world\n' >one.txt
"$DTRUN" tokenize -o tok one.txt >tok.out 2>tok.err || fail "tokenize: $(cat tok.err)"
grep -q "^dtrun: tokenize: 1 file, 1 document (1 val) -> 3 train tokens in .*, 1 val token in " tok.err && ok "tokenize: $(head -1 tok.err)" || fail "tokenize: $(cat tok.err)"
"$DTRUN" inspect ck >insp.txt 2>&1 || fail "inspect: $(cat insp.txt)"
grep -q "^layout      dp 1 x tp 1 x pp 1 = 1 rank, mode" insp.txt && grep -q "^hardware    .*, 1 rank, 1 per node" insp.txt &&
  ok "inspect: 1 rank" || fail "inspect: $(cat insp.txt)"
tiny_job w.yaml "parallel: {dp: 1}"
run_dtrun w --nproc-per-node=2 w.yaml
expect_one_line w 2 "dtrun: w.yaml:" "parallel.dp 1 x tp 1 x pp 1 = 1 worker, but 2 are started"
port=$(python3 "$REPO/test/helpers/free_port.py") || fail "no free port"
for n in 0 1; do
  timeout -k 2 30 "$DTRUN" --nnodes=1:2 --nproc-per-node=1 --node-rank=$n --rdzv-endpoint=127.0.0.1:$port \
    --rdzv-conf=last_call_timeout=0.5 -- true >rd$n.out 2>rd$n.err &
  pids[$n]=$!
done
wait ${pids[0]} ${pids[1]}
cat rd0.err rd1.err >rd.err
grep -q "round 0 closed: " rd.err || fail "no daemon lines: $(cat rd.err)"
plural='(^| )1 (nodes|keys|participants|documents|tokens|ranks|workers)([^a-z]|$)'
grep -Eq "$plural" rd.err tok.err insp.txt && fail "a plural after 1: $(grep -Eh "$plural" rd.err tok.err insp.txt)"
ok "the daemon's lines: $(grep -h "closed\|deleted" rd.err | tr '\n' ' ')"

# 3. A metrics file's bad line.
printf '{"step":1,"loss":2.0}\nnot json\n' >bad.jsonl
"$DTRUN" plot bad.jsonl -o bad.svg >plot.out 2>plot.err; rc=$?
grep -q "bad.jsonl:2: not a JSON object (a dtrun metrics file holds one per line)" plot.err && ok "plot: $(cat plot.err)" ||
  fail "plot: exit $rc: $(cat plot.err)"
finish
