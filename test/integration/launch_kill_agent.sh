#!/usr/bin/env bash
# kill -9 of the launcher leaves no worker behind: every worker has
# PR_SET_PDEATHSIG(SIGKILL) from the child guard.
source "$(dirname "$0")/../helpers/launch_common.bash"
start_agent --nproc-per-node=8 -- bash -c 'exec -a "$0" sleep 60' $MARK
agent=$AGENT
wait_for "count_workers $agent" 8 15 || fail "8 workers did not start (have $(count_workers $agent))"
kill -9 $agent
wait_agent 2>/dev/null
wait_for "count_workers $agent" 0 5 || fail "$(count_workers $agent) workers survived kill -9 of the agent"
echo "ok: 8 workers, agent killed with SIGKILL, 0 left"

# Agents under an agent (dtrun as the program): killing the top one takes down
# the whole tree, each level by its own death signal.
start_agent --nproc-per-node=2 -- "$DTRUN" --nproc-per-node=2 --no-python bash -c 'exec -a "$0" sleep 60' $MARK
agent=$AGENT
# Two levels of agents: the outer one's 2 workers are inner agents with 2 workers each.
wait_for "count_workers $agent" 6 15 || fail "nested: 6 processes did not start (have $(count_workers $agent))"
kill -9 $agent
wait_agent 2>/dev/null
# Inner agents die by their death signal; their workers then die by theirs.
wait_for "count_workers $agent" 0 5 || fail "nested: $(count_workers $agent) processes survived"
echo "ok: nested agents die in a chain"
