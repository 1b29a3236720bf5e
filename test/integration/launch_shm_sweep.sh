#!/usr/bin/env bash
# Shared memory a dead worker left behind goes with it (lib/util/shm_name.h):
# the shm transport's segments are named /dtrun.<pid of their maker>.*, and a
# worker killed in the middle of a group's setup (the agent stopping the others
# after one failed) could not unlink its own: it would hold megabytes of
# /dev/shm until reboot. Here each of 2 workers makes a segment under its pid,
# rank 1 fails and the agent stops rank 0; it removes both workers' segments,
# and leaves alone a segment named for a pid that is not one of its workers.
source "$(dirname "$0")/../helpers/launch_common.bash"
other=/dev/shm/dtrun.4190002.0.$MARK
echo x >"$other"
"$DTRUN" --nproc-per-node=2 --max-restarts=0 -- python3 -c "
import os, sys, time
open('/dev/shm/dtrun.%d.0.1' % os.getpid(), 'w').write('x')
print('pid', os.getpid(), flush=True)
mark = '$T/rank0-ready'
if os.environ['RANK'] == '0':
    open(mark, 'w').close()
    time.sleep(60)  # stopped by the agent when rank 1 fails
while not os.path.exists(mark):
    time.sleep(0.01)
sys.exit(3)" >"$T/out" 2>&1
rc=$?
[ $rc -eq 3 ] || { cat "$T/out"; rm -f "$other"; fail "exit $rc, want rank 1's 3"; }
pids=$(sed -n 's/^\[default\/[01]\]:pid \([0-9]*\)$/\1/p' "$T/out" | sort -u)
[ "$(echo "$pids" | grep -c .)" -eq 2 ] || { cat "$T/out"; rm -f "$other"; fail "no two worker pids"; }
for p in $pids; do
  ls /dev/shm/dtrun."$p".* >/dev/null 2>&1 && { rm -f "$other"; fail "worker $p's segment is still in /dev/shm"; }
done
[ -e "$other" ] || fail "a segment of another pid was removed"
rm -f "$other"
echo "ok: the segments of workers $(echo $pids) went with them; another pid's stayed"
echo PASS
