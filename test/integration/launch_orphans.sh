#!/usr/bin/env bash
# Nothing of a job outlives kill -9 of its agent (issue 15.5): each of 2
# workers starts a child in its own process group and a grandchild that leaves
# for a session of its own (setsid, as a daemonising data loader would); within
# 2 s of kill -9 of the agent no process remains, checked by the workers'
# process groups and by scanning /proc/*/environ for the job's id
# (TORCHELASTIC_RUN_ID, set from --rdzv-id). A job that ends normally leaves
# nothing behind either.
source "$(dirname "$0")/../helpers/launch_common.bash"
ID=orphans$MARK

# job_pids: pids whose environment holds TORCHELASTIC_RUN_ID=$ID (zombies excluded)
job_pids() {
  local e p
  for e in $(grep -lszx "TORCHELASTIC_RUN_ID=$ID" /proc/[0-9]*/environ); do
    p=${e#/proc/}; p=${p%/environ}
    grep -qs '^State:.*Z' "/proc/$p/status" && continue
    echo "$p"
  done
}
count_job() { job_pids | wc -l; }

# A worker: a child in the worker's group, which starts a grandchild in a new session.
W='echo $$ >'"$T"'/pgid.$RANK; sh -c "setsid sleep 60 & exec sleep 60" & echo ready; exec sleep 60'
start_agent --nproc-per-node=2 --rdzv-id=$ID -- bash -c "$W" $MARK
wait_for count_job 6 15 || fail "want 6 processes (2 workers, 2 children, 2 grandchildren), have $(count_job)"
pgids=$(cat "$T"/pgid.* | paste -sd,)
sids=$(for p in $(job_pids); do ps -o sid= -p "$p"; done | sort -u | wc -l)
[ "$sids" -ge 3 ] || fail "the grandchildren did not leave the workers' sessions ($sids sessions)"
t0=$(date +%s%N)
kill -9 $AGENT
# live members of the workers' groups (a killed orphan stays a zombie until init reaps it: dead, not counted)
in_groups() { ps -o stat= -g "$pgids" | grep -vc '^Z'; }
gone() { [ "$(count_job)" = 0 ] && [ "$(in_groups)" = 0 ]; }
until gone; do
  if [ $(( ($(date +%s%N) - t0) / 1000000 )) -gt 2000 ]; then
    ps -o pid,pgid,sid,args -p "$(job_pids | paste -sd,)" 2>/dev/null
    fail "$(count_job) processes of the job (environment) and $(in_groups) in the workers' groups survived kill -9 of the agent by 2 s"
  fi
  sleep 0.02
done
wait_agent 2>/dev/null
echo "ok: kill -9 of the agent: 6 processes (workers, children, grandchildren in their own sessions) gone in $(( ($(date +%s%N) - t0) / 1000000 )) ms"

# A normal end: the workers exit 0 and leave a grandchild behind; dtrun reaps it before returning.
W2='setsid sleep 60 & echo ready'
start_agent --nproc-per-node=2 --rdzv-id=$ID -- bash -c "$W2" $MARK
wait_agent
[ $RC = 0 ] || { cat "$T/err"; fail "the job exited $RC, want 0"; }
[ "$(count_job)" = 0 ] || fail "$(count_job) processes left behind by a job that finished"
echo "ok: a finished job leaves no process behind"
