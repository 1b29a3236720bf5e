#!/usr/bin/env bash
# dtrun-test: waits (it mostly sleeps on timeouts: test/run.sh runs it in the side lane, beside the pool)
# A real Slurm: Debian's slurm-wlm runs on this machine as two emulated nodes,
# n1 and n2 (test/slurm/cluster.bash), and scripts/slurm/train.sbatch is
# submitted as shipped, with its own #SBATCH lines, from a directory that
# holds nothing (a fresh checkout has no runs/), overriding only what this
# machine lacks: --gpus-per-node=0 (no GPU here; the workers train on the CPU)
# and --cpus-per-task=1 (the emulated nodes have 4 CPUs, not 16); NPROC_PER_NODE=2
# and DTRUN are the script's own knobs:
#  1. a dtrun job whose 4 workers print their ranks and meet at a KV barrier
#     runs to completion: one agent per node, the rendezvous on n1 at
#     29400 + job id mod 1000, world size 4, ranks 0..3, node ranks 0 and 1 on
#     n1 and n2, Slurm's exit code 0, the output in the submit directory as
#     dtrun-JOBID.out (the script's --output=%x-%j.out);
#  2. a worker exiting 7 on node 1 ends the whole job with exit code 7;
#  3. scancel of a running job leaves no worker and no agent within 10 s, even
#     workers that ignore SIGTERM (dtrun's --term-timeout SIGKILLs them);
#  4. the time limit's SIGUSR1 (the script's --signal=B:USR1@60, sent here at
#     once with scancel --batch --signal=USR1, which signals the batch shell
#     alone, as B: does): the built-in trainer saves a checkpoint and stops,
#     the script requeues the job, and its next run, the same command, resumes
#     from the saved step and finishes: one job id, Restarts=1, COMPLETED 0:0,
#     both runs in the one output file;
#  5. the same from Slurm itself: with --time=2 (SBATCH_TIMELIMIT=2) the
#     script's --signal=B:USR1@60 comes 60 to 90 s after the start (this job
#     runs beside the others), reaches the script
#     and, through srun and the agents, 4 workers that trap it; the job is
#     requeued;
#  6. a signal srun passes on reaches every process of the step (Slurm's
#     process tracking), the workers' own children and dtrun's watchdogs too:
#     the watchdogs outlive SIGUSR1, and the job goes on.
# Needs root (slurmd, munged). Adds "127.0.0.1 n1 n2" to /etc/hosts when those
# names do not resolve; nothing else outside its temp dir is changed.
source "$(dirname "$0")/../helpers/launch_common.bash"
source test/slurm/cluster.bash
skip() { echo "$*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root to run slurmd and munged"
for b in munged munge unmunge slurmctld slurmd sbatch srun scancel squeue scontrol sinfo; do
  command -v $b >/dev/null || skip "$b not found: install slurm-wlm and munge (scripts/deps.sh does)"
done
# Not inside someone else's allocation: the jobs must see only this cluster.
for v in $(compgen -e | grep -E '^(SLURM|SBATCH|SRUN|SALLOC)_'); do unset "$v"; done

trap 'slurm_cluster_stop; cleanup' EXIT
t0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# The node names must resolve to this machine: dtrun's endpoint will be "n1".
need=()
for h in n1 n2; do
  a=$(getent ahostsv4 $h | awk 'NR == 1 {print $1}')
  if [ -z "$a" ]; then need+=("$h")
  elif [[ $a != 127.* ]]; then skip "host name $h resolves to $a, not to this machine; the emulated Slurm nodes need it"; fi
done
if [ ${#need[@]} -gt 0 ]; then
  echo "127.0.0.1 ${need[*]}" >>/etc/hosts 2>/dev/null || skip "cannot add '127.0.0.1 ${need[*]}' to /etc/hosts"
fi

build_kv_barrier
chmod 755 "$T"
# The jobs run a copy, so a rebuild of bin/dtrun while the test runs cannot
# make the launch fail ("execve(): Permission denied" from slurmstepd); beside
# it, as in a checkout, configs/ (the hardware profiles of the memory check).
mkdir -p "$T/bin" && cp "$DTRUN" "$T/bin/dtrun" && ln -s "$PWD/configs" "$T/configs" && DTRUN=$T/bin/dtrun ||
  fail "cannot copy $DTRUN"
s=$(date +%s%N)
slurm_cluster_start "$T/slurm" || { slurm_cluster_logs; skip "no Slurm cluster: $SLURM_WHY"; }
echo "Slurm up (munged, slurmctld, slurmd n1 + n2) in $(ms $s) ms: $(sl sinfo -h -o '%P %a %D %t %N')"

# The jobs are submitted from here: the script's output path is relative to it.
REPO=$PWD SUBMIT=$T/submit
mkdir -p "$SUBMIT"
out_of() { echo "$SUBMIT/dtrun-$1.out"; } # the script's --output=%x-%j.out

sfail() { # MESSAGE [JOB-ID]: the job's output and the daemons' logs, then fail
  [ -n "${2:-}" ] && { echo "---- job $2: $(sl scontrol show job -o "$2" 2>&1 | grep -oE 'JobState=\S+|Reason=\S+|ExitCode=\S+|Restarts=\S+' | tr '\n' ' ')"; cat "$(out_of "$2")" 2>/dev/null; }
  slurm_cluster_logs
  fail "$1"
}

# submit ARGS...: sbatch train.sbatch ARGS (2 nodes, 2 workers per node); sets JOB.
# Only what this machine cannot give is overridden: no GPUs, its CPU count.
submit() {
  local out
  out=$(cd "$SUBMIT" && DTRUN=$DTRUN NPROC_PER_NODE=2 sl sbatch --parsable --cpus-per-task=1 --gpus-per-node=0 \
          "$REPO/scripts/slurm/train.sbatch" "$@" 2>&1) || sfail "sbatch: $out"
  JOB=${out%%;*}
  [[ $JOB =~ ^[0-9]+$ ]] || sfail "sbatch printed '$out', not a job id"
}
# wait_job ID SECONDS: until the job has ended; sets STATE and EXIT (Slurm's).
wait_job() {
  local i line
  for i in $(seq 1 $(( $2 * 10 ))); do
    line=$(sl scontrol show job -o "$1" 2>/dev/null)
    STATE=$(grep -oP 'JobState=\K\S+' <<<"$line") EXIT=$(grep -oP ' ExitCode=\K\S+' <<<"$line")
    case $STATE in PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED|REQUEUED|'') ;; *) return 0;; esac
    sleep 0.1
  done
  sfail "job $1 still $STATE after $2 s" "$1"
}
# check_meta ID: both agents read the allocation and met on n1 at the job's port.
check_meta() {
  local id=$1 port=$((29400 + $1 % 1000)) n
  for n in 0 1; do
    grep -qx "dtrun: Slurm job $id: node $n of 2, rendezvous at n1:$port" "$(out_of "$id")" ||
      sfail "job $id: no agent took node rank $n with the rendezvous at n1:$port" "$id"
  done
  grep -q "dtrun rdzv: round 0 closed: 2 nodes, world size 4," "$(out_of "$id")" ||
    sfail "job $id: no rendezvous round of 2 nodes and world size 4" "$id"
}

# 5 (submitted first, checked after 4 and 6). The script's own
# --signal=B:USR1@60 at a real time limit: with a limit of two minutes
# (SBATCH_TIMELIMIT=2, the override this case needs) Slurm sends it 60 to 90 s
# after the start (it looks every 30 s), when the workers are long up; they
# trap SIGUSR1 and exit 0, and the script requeues. No $MARK on these workers:
# the other cases count theirs meanwhile (the cluster's stop ends these).
cat >"$T/usr1-worker.sh" <<'EOF'
trap 'echo "got USR1"; exit 0' USR1
echo ready
while :; do sleep 0.1; done # Slurm signals the sleep too (case 6): the loop outlives it
EOF
s5=$(date +%s%N)
SBATCH_TIMELIMIT=2 submit -- bash "$T/usr1-worker.sh"
JOB5=$JOB

# 1. Every rank prints what it was given, then all 4 meet at a KV barrier.
s=$(date +%s%N)
submit -- sh -c "echo rank=\$RANK world=\$WORLD_SIZE group=\$GROUP_RANK local=\$LOCAL_RANK node=\$SLURMD_NODENAME; exec $T/kv_barrier slurm 20 # $MARK"
wait_job "$JOB" 60
out=$(out_of "$JOB")
echo "job $JOB (2 nodes x 2 workers): $STATE, exit code $EXIT, $(ms $s) ms from sbatch to the end"
[ -s "$out" ] || sfail "job $JOB wrote no $out (the script's --output=%x-%j.out in the submit directory)" "$JOB"
[ ! -e "$SUBMIT/runs" ] || sfail "a runs/ folder appeared in the submit directory" "$JOB"
check_meta "$JOB"
for r in 0 1 2 3; do
  g=$((r / 2)) l=$((r % 2))
  grep -qx "\[default/$r\]:rank=$r world=4 group=$g local=$l node=n$((g + 1))" "$out" ||
    sfail "rank $r did not report rank=$r world=4 group=$g local=$l node=n$((g + 1))" "$JOB"
  grep -qx "\[default/$r\]:kv_barrier: rank $r of 4 passed slurm" "$out" || sfail "rank $r did not pass the KV barrier" "$JOB"
done
n=$(grep -c '^\[default/[0-9]*\]:rank=' "$out")
[ "$n" = 4 ] || sfail "$n rank lines, want 4" "$JOB"
grep -q '^srun: error' "$out" && sfail "srun reported an error" "$JOB"
[ "$STATE" = COMPLETED ] && [ "$EXIT" = 0:0 ] || sfail "job $JOB: $STATE, exit code $EXIT; want COMPLETED 0:0" "$JOB"
echo "ok: world size 4 over n1 and n2, ranks 0..3, node ranks 0 and 1, KV barrier, exit 0"

# 2. Rank 3 (node 1) exits 7 while the others sleep: the job ends with 7, fast.
# Workers sleep as $T/$MARK-sleep, so pgrep -f finds every one of them.
ln -s "$(command -v sleep)" "$T/$MARK-sleep"
s=$(date +%s%N)
submit -- sh -c "[ \$RANK = 3 ] && exit 7; exec $T/$MARK-sleep 60"
wait_job "$JOB" 30
secs=$(( $(ms $s) / 1000 ))
echo "job $JOB (rank 3 exits 7): $STATE, exit code $EXIT, $(ms $s) ms"
check_meta "$JOB"
grep -q 'rank 3 .*exited with status 7' "$(out_of "$JOB")" || sfail "no root-cause line for rank 3's status 7" "$JOB"
[ "$EXIT" = 7:0 ] || sfail "job $JOB: exit code $EXIT, want 7:0 (the worker's own status)" "$JOB"
[ $secs -lt 20 ] || sfail "the failure took ${secs} s to end the job; the other workers sleep 60 s" "$JOB"
[ -z "$(pgrep -f "$MARK")" ] || sfail "processes left after the failed job: $(pgrep -a -f "$MARK")" "$JOB"
echo "ok: a worker's exit status 7 is the job's exit code"

# 3. A long job: once all 4 workers sleep, scancel ends every one and both agents.
# Odd ranks ignore SIGTERM, so they end only through dtrun's SIGKILL after its
# --term-timeout (2 s here), long before Slurm's own (KillWait = 30 s).
submit --term-timeout=2 -- sh -c "[ \$((RANK % 2)) = 0 ] || trap '' TERM; exec $T/$MARK-sleep 300"
for i in $(seq 1 300); do
  [ "$(pgrep -f "^$T/$MARK-sleep 300" | wc -l)" = 4 ] && break
  if [ $((i % 10)) = 0 ] && ! sl scontrol show job -o "$JOB" 2>/dev/null | grep -qE 'JobState=(PENDING|CONFIGURING|RUNNING) '; then
    break # the job ended before its workers were all up
  fi
  sleep 0.1
done
workers=$(pgrep -f "^$T/$MARK-sleep 300" | tr '\n' ' ')
agents=$(pgrep -f "^$DTRUN .*$MARK" | tr '\n' ' ')
[ "$(wc -w <<<"$workers")" = 4 ] || sfail "4 workers were not up (in 30 s, or before the job ended); running: $workers" "$JOB"
[ "$(wc -w <<<"$agents")" = 2 ] || sfail "want 2 dtrun agents (one per node), found: $agents" "$JOB"
ignoring=0
for p in $workers; do
  # SigIgn bit 15 (SIGTERM, mask 0x4000): set in the odd ranks only.
  (( 0x$(awk '/^SigIgn:/ {print $2}' /proc/$p/status 2>/dev/null || echo 0) & 0x4000 )) && ignoring=$((ignoring + 1))
done
[ $ignoring = 2 ] || sfail "$ignoring workers ignore SIGTERM, want 2 (the odd ranks)" "$JOB"
check_meta "$JOB"
s=$(date +%s%N)
sl scancel "$JOB" || sfail "scancel $JOB failed" "$JOB"
for i in $(seq 1 100); do
  [ -z "$(pgrep -f "$MARK")" ] && break
  sleep 0.1
done
gone=$(ms $s)
left=$(pgrep -a -f "$MARK")
[ -z "$left" ] || sfail "10 s after scancel these still run:
$left" "$JOB"
wait_job "$JOB" 40
echo "scancel $JOB: workers ($workers) and agents ($agents) gone in $gone ms; job $STATE"
[ "$STATE" = CANCELLED ] || sfail "job $JOB: $STATE after scancel" "$JOB"
# Both agents (not Slurm, whose SIGKILL would come 30 s later) killed the
# worker that ignored SIGTERM.
n=$(grep -c '^dtrun: 1 worker still running 2 s after the stop signal; sending SIGKILL$' "$(out_of "$JOB")")
[ "$n" = 2 ] || sfail "$n agents, not 2, said they sent SIGKILL to their SIGTERM-ignoring worker" "$JOB"
echo "ok: scancel stopped every worker and agent"

# 4. SIGUSR1 at the time limit: checkpoint, requeue, resume. A tiny GPT over
# 2 nodes x 2 workers, slowed to 50 ms a step; the signal once step 10 is in
# the metrics file. The requeued job waits Slurm's requeue delay (cred_expire,
# 10 s in this cluster's slurm.conf) before its second run.
sed -e 's/^  steps: .*/  steps: 120/' test/parallel/gpt-tiny.yaml >"$T/usr1.yaml"
printf '  metrics: %s/m.jsonl\ncheckpoint:\n  dir: %s/ck\n  every: 1000\nparallel:\n  dp: 4\n' "$T" "$T" >>"$T/usr1.yaml"
s=$(date +%s%N)
DTRUN_TEST_STEP_DELAY_MS=50 submit "$T/usr1.yaml"
for i in $(seq 1 600); do
  grep -q '"step":10,' "$T/m.jsonl" 2>/dev/null && break
  sleep 0.1
done
grep -q '"step":10,' "$T/m.jsonl" 2>/dev/null || sfail "step 10 not reached in 60 s" "$JOB"
sl scancel --batch --signal=USR1 "$JOB" || sfail "scancel --batch --signal=USR1 $JOB failed" "$JOB"
out=$(out_of "$JOB")
for i in $(seq 1 300); do
  sl scontrol show job -o "$JOB" 2>/dev/null | grep -q ' Restarts=1 ' && break
  sleep 0.1
done
sl scontrol show job -o "$JOB" 2>/dev/null | grep -q ' Restarts=1 ' || sfail "job $JOB was not requeued within 30 s of SIGUSR1" "$JOB"
saved=$(sed -n 's/^\[default\/0\]:dtrun: .*: stopped at step \([0-9]*\) with a checkpoint in .*/\1/p' "$out" | head -1)
[ -n "$saved" ] && [ "$saved" -ge 10 ] && [ "$saved" -lt 120 ] || sfail "rank 0 printed no '...: stopped at step N with a checkpoint' line (N >= 10)" "$JOB"
[ -d "$T/ck/step_$(printf %06d "$saved")" ] || sfail "no checkpoint of step $saved in $T/ck" "$JOB"
grep -q "^train.sbatch: requeueing job $JOB; " "$out" || sfail "the script did not say it requeues" "$JOB"
echo "job $JOB: SIGUSR1 -> checkpoint of step $saved, requeued ($(ms $s) ms since sbatch)"
wait_job "$JOB" 90
echo "job $JOB: $STATE, exit code $EXIT, $(ms $s) ms from sbatch to the end of its second run"
[ "$STATE" = COMPLETED ] && [ "$EXIT" = 0:0 ] || sfail "job $JOB after its requeue: $STATE, exit code $EXIT; want COMPLETED 0:0" "$JOB"
sl scontrol show job -o "$JOB" | grep -q ' Restarts=1 ' || sfail "job $JOB: want Restarts=1" "$JOB"
grep -q "^train.sbatch: job $JOB on .*, run 1$" "$out" && grep -q "^train.sbatch: job $JOB on .*, run 2$" "$out" ||
  sfail "$out does not hold both runs (the script's --open-mode=append)" "$JOB"
python3 - "$T/m.jsonl" "$saved" <<'PY' || sfail "the second run did not resume from step $saved and finish: $(grep attempt_start "$T/m.jsonl")" "$JOB"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
saved = int(sys.argv[2])
starts = [r["from_step"] for r in rows if r.get("event") == "attempt_start"]
assert starts == [0, saved], starts
steps = [r["step"] for r in rows if "loss" in r]
assert steps[-1] == 120 and steps.index(saved + 1) > steps.index(saved), steps
PY
echo "ok: SIGUSR1 saved step $saved, the job was requeued, its second run resumed from step $saved and finished step 120"

# 6. What srun passes on, Slurm sends to every process of the step (its
# process tracking), not only to the agents: a worker's child in a session of
# its own gets SIGUSR1 too, and so does each agent's watchdog, which must
# outlive it (it kills what the workers leave behind once the agent ends).
# Here the workers trap SIGUSR1 and go on: the job goes on.
cat >"$T/usr1-goes-on.sh" <<'EOF'
trap 'echo "got USR1"' USR1
setsid bash -c 'trap "echo child got USR1" USR1; while :; do sleep 0.1; done' &
echo ready
while :; do sleep 0.1; done
EOF
watchdogs() { # JOB: the watchdogs of that job's agents
  local p
  for p in $(pgrep -f -- "--dtrun-watchdog"); do
    grep -qzx "SLURM_CONF=$SLURM_CONF_FILE" "/proc/$p/environ" 2>/dev/null &&
      grep -qzx "SLURM_JOB_ID=$1" "/proc/$p/environ" 2>/dev/null && echo "$p"
  done
}
submit -- bash "$T/usr1-goes-on.sh" $MARK
out=$(out_of "$JOB")
for i in $(seq 1 300); do [ "$(grep -c '^\[default/[0-3]\]:ready$' "$out" 2>/dev/null)" = 4 ] && break; sleep 0.1; done
[ "$(grep -c '^\[default/[0-3]\]:ready$' "$out")" = 4 ] || sfail "4 workers were not ready in 30 s" "$JOB"
before=$(watchdogs "$JOB" | wc -l)
[ "$before" = 2 ] || sfail "$before watchdogs, want 2 (one per agent)" "$JOB"
sl scancel --signal=USR1 "$JOB" || sfail "scancel --signal=USR1 $JOB failed" "$JOB"
for i in $(seq 1 100); do [ "$(grep -c '^\[default/[0-3]\]:child got USR1$' "$out")" = 4 ] && break; sleep 0.1; done
[ "$(grep -c '^\[default/[0-3]\]:child got USR1$' "$out")" = 4 ] || sfail "Slurm did not signal the workers' own children" "$JOB"
[ "$(grep -c '^\[default/[0-3]\]:got USR1$' "$out")" -ge 4 ] || sfail "not every worker got SIGUSR1" "$JOB"
sleep 1
after=$(watchdogs "$JOB" | wc -l)
sl scontrol show job -o "$JOB" | grep -q 'JobState=RUNNING' || sfail "the job did not go on after SIGUSR1" "$JOB"
sl scancel "$JOB"
[ "$after" = 2 ] || sfail "$after of 2 watchdogs left after Slurm's SIGUSR1 reached every process" "$JOB"
echo "ok: Slurm's SIGUSR1 reaches every process of the step; the job goes on and both watchdogs live"
# 5, checked: the job submitted first got Slurm's SIGUSR1 and was requeued.
out=$(out_of "$JOB5")
for i in $(seq 1 1500); do
  sl scontrol show job -o "$JOB5" 2>/dev/null | grep -q ' Restarts=1 ' && break
  sleep 0.1
done
secs=$(( $(ms $s5) / 1000 ))
sl scontrol show job -o "$JOB5" 2>/dev/null | grep -q ' Restarts=1 ' || sfail "job $JOB5 (--time=2): not requeued $secs s after sbatch" "$JOB5"
sl scancel "$JOB5" # its second run would be signalled and requeued again
grep -q "^train.sbatch: SIGUSR1 (the time limit is near)" "$out" || sfail "the script did not get SIGUSR1 from Slurm" "$JOB5"
[ "$(grep -c '^\[default/[0-3]\]:got USR1$' "$out")" = 4 ] || sfail "not every worker got SIGUSR1" "$JOB5"
grep -q "^train.sbatch: requeueing job $JOB5; " "$out" || sfail "the script did not requeue" "$JOB5"
echo "ok: Slurm's own SIGUSR1 (--signal=B:USR1@60, --time=2) reached the script and the 4 workers; requeued $secs s after sbatch"
echo "($(ms $t0) ms in all)"
