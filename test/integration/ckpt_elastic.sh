#!/usr/bin/env bash
# Elastic training over three "nodes" (network namespaces, test/helpers/netns.bash):
# `dtrun --nnodes=2:3` with one worker per node trains a tiny GPT whose job says
# `parallel.dp: auto` (dp = world / (tp x pp)) and a fixed global batch of 12 with
# micro_batch 2, so three nodes accumulate 2 micro-batches and two nodes 3. After
# a few checkpoints one node is killed (SIGKILL of its agent: its worker dies
# with it); the others notice, re-rendezvous into a smaller round (2 nodes), the
# workers resume from the latest checkpoint with dp 2 instead of 3 and finish.
# The whole run must be the single-process run within the layout tolerance
# (loss relative 1e-5, parameters 1e-4): same global batch, same curve.
source "$(dirname "$0")/../helpers/launch_common.bash"
source "$(dirname "$0")/../helpers/netns.bash"
netns_setup 3
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OMP_NUM_THREADS=1

job() { # OUT.yaml METRICS CKPT_DIR
  sed -e 's/^  steps: .*/  steps: 40/' -e 's/^  global_batch: .*/  global_batch: 12\n  micro_batch: 2/' \
    test/parallel/gpt-tiny.yaml >"$1"
  printf '  metrics: %s\nparallel:\n  dp: auto\ncheckpoint:\n  dir: %s\n  every: 4\n' "$2" "$3" >>"$1"
}
job "$T/ref.yaml" "$T/ref.jsonl" "$T/ref.ck"
DTRUN_DUMP_PARAMS=$T/ref.bin "$DTRUN" worker "$T/ref.yaml" >"$T/ref.log" 2>&1 || { cat "$T/ref.log"; fail "reference run"; }

job "$T/el.yaml" "$T/el.jsonl" "$T/el.ck"
conf=heartbeat_timeout=2,keep_alive_interval=0.5,last_call_timeout=3
pids=()
for i in 2 1 0; do   # node 0 (the endpoint's address: it hosts) last
  ip netns exec ${NS[$i]} env DTRUN_TEST_STEP_DELAY_MS=100 DTRUN_DUMP_PARAMS="$T/el.bin" "$DTRUN" --nnodes=2:3 \
    --nproc-per-node=1 --max-restarts=2 --rdzv-endpoint=10.77.0.1:29400 --rdzv-id=el$NETNS_ID \
    --rdzv-conf=$conf "$T/el.yaml" >"$T/n$i.out" 2>"$T/n$i.err" &
  pids[$i]=$!
done
( sleep 90 && kill -9 "${pids[@]}" ) >/dev/null 2>&1 &
watchdog=$!

step_of() { grep '"loss"' "$1" 2>/dev/null | tail -1 | sed -n 's/^{"step":\([0-9]*\),.*/\1/p'; }
for ((i = 0; i < 600; i++)); do s=$(step_of "$T/el.jsonl"); [ "${s:-0}" -ge 10 ] && break; sleep 0.05; done
grep -q "layout dp=3 tp=1 pp=1 ddp (world 3)" "$T"/n*.out || { tail -5 "$T"/n*.err "$T"/n*.out; fail "the first round is not 3 nodes x 1 worker"; }
s=$(step_of "$T/el.jsonl")
[ "${s:-0}" -ge 10 ] || { tail -5 "$T"/n*.err; fail "training did not reach step 10"; }
echo "killing node 2 (10.77.0.3) after step $s"
kill -9 "${pids[2]}"
wait "${pids[0]}"; r0=$?
wait "${pids[1]}"; r1=$?
kill $watchdog 2>/dev/null
[ $r0 = 0 ] && [ $r1 = 0 ] || { tail -20 "$T/n0.err" "$T/n1.err"; fail "surviving nodes exited $r0, $r1"; }
cat "$T/n0.err" "$T/n1.err" >"$T/both.err"
cat "$T/n0.out" "$T/n1.out" >"$T/both.out"
grep -q "dead" "$T/both.err" || fail "nobody noticed the dead node"
grep -q "restarting the workers (restart 1 of 2)" "$T/both.err" || fail "no restart"
line=$(grep -o "resuming from $T/el.ck/step_[0-9]*: step [0-9]* (saved under dp=3 tp=1 pp=1 ddp; now dp=2 tp=1 pp=1 ddp)" "$T/both.out" | head -1)
[ -n "$line" ] || { grep dtrun "$T/both.out" | tail; fail "no resume with dp 3 -> 2"; }
grep -q "layout dp=2 tp=1 pp=1 ddp (world 2)" "$T/both.out" || fail "the second round is not 2 nodes"
# the same global batch: accumulation went from 2 to 3 micro-batches
python3 - "$T/el.ck" <<'EOF' || fail "grad_accum did not follow dp"
import json, os, sys
d = sys.argv[1]
steps = sorted(s for s in os.listdir(d) if s.startswith("step_"))
ix = json.load(open(os.path.join(d, steps[-1], "index.json")))
assert ix["layout"]["dp"] == 2 and ix["layout"]["world"] == 2, ix["layout"]
assert "global_batch: 12" in ix["job"] and "micro_batch: 2" in ix["job"] and "grad_accum: 3" in ix["job"], ix["job"]
assert "dp: auto" in ix["job"]
EOF
out=$(python3 test/parallel/compare.py "$T/ref.jsonl" "$T/ref.bin" "$T/el.jsonl" "$T/el.bin" 1e-5 1e-4 2>&1) ||
  { echo "$out"; fail "the elastic run left the single-process curve"; }
echo "ok: node killed after step $s; ${line#resuming from $T/}; ${out##*$'\n'}"
