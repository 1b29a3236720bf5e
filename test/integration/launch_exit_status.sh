#!/usr/bin/env bash
# dtrun's exit status is the first failed worker's: its code, or 128 + signal;
# 127 when the program does not exist; 0 when every worker succeeds.
source "$(dirname "$0")/../helpers/launch_common.bash"
expect() { # WANT DESCRIPTION DTRUN-ARGS...
  local want=$1 what=$2; shift 2
  timeout -k 2 30 "$DTRUN" "$@" >"$T/out" 2>"$T/err"; local rc=$?
  [ $rc -eq "$want" ] || { cat "$T/out" "$T/err"; fail "$what: dtrun exited $rc, want $want"; }
  echo "ok: $what -> $rc"
}
start=$(date +%s)
expect 7 "rank 1 exits 7 while the others sleep" --nproc-per-node=4 -- sh -c 'if [ $RANK = 1 ]; then echo bye; exit 7; fi; exec sleep 30'
grep -q "rank 1 (local rank 1.*exited with status 7" "$T/err" || fail "no root cause for rank 1"
grep -q "^dtrun:     \[default/1\]:bye$" "$T/err" || fail "the report lacks the worker's last line"
[ $(( $(date +%s) - start )) -lt 10 ] || fail "the sleeping workers were not stopped promptly"
expect 139 "a worker dies of SIGSEGV" --nproc-per-node=2 -- sh -c 'if [ $RANK = 0 ]; then kill -SEGV $$; fi; exec sleep 30'
grep -q "killed by SIGSEGV" "$T/err" || fail "no signal name in the report"
expect 127 "the program does not exist" --nproc-per-node=2 -- /nonexistent/program
grep -q "cannot run '/nonexistent/program': No such file or directory" "$T/out" "$T/err" || fail "no line naming the missing program"
printf 'echo hi\n' >"$T/noexec"; chmod 644 "$T/noexec"
expect 126 "the program is not executable" --nproc-per-node=1 -- "$T/noexec"
expect 0 "every worker succeeds" --nproc-per-node=3 -- true
expect 3 "the first failure counts, not the codes of the workers it stopped" \
  --nproc-per-node=2 -- sh -c 'trap "exit 9" TERM; if [ $RANK = 1 ]; then exit 3; fi; sleep 30 & wait'
