#!/usr/bin/env bash
# --log-dir DIR/RUN_ID/attempt_N/RANK/{stdout,stderr}.log, --redirects, --tee and
# --local-ranks-filter as torchrun defines them.
source "$(dirname "$0")/../helpers/launch_common.bash"
W='echo out $RANK; echo err $RANK >&2'
run() { timeout -k 2 20 "$DTRUN" --nproc-per-node=2 --rdzv-id=logtest "$@" -- sh -c "$W" >"$T/out" 2>"$T/err" || fail "dtrun $* failed"; }
file() { cat "$T/logs/logtest/attempt_0/$1/$2.log" 2>/dev/null; }

# --log-dir alone: both streams on the console and in the files.
run --log-dir "$T/logs"
[ "$(file 1 stdout)" = "out 1" ] && [ "$(file 1 stderr)" = "err 1" ] || fail "--log-dir: files hold '$(file 1 stdout)' '$(file 1 stderr)'"
grep -qx '\[default/1\]:out 1' "$T/out" && grep -qx '\[default/0\]:err 0' "$T/err" || fail "--log-dir: console lost lines"
echo "ok: --log-dir"

# -r 1: stdout only in the file; stderr on the console.
rm -rf "$T/logs"; run --log-dir "$T/logs" -r 1
[ "$(file 0 stdout)" = "out 0" ] || fail "-r 1: stdout.log"
[ ! -s "$T/out" ] || fail "-r 1: stdout reached the console"
grep -qx '\[default/0\]:err 0' "$T/err" || fail "-r 1: stderr missing from the console"
[ -z "$(file 0 stderr)" ] || fail "-r 1: stderr.log written"
echo "ok: --redirects 1"

# -t 0:1,1:2 per local rank: rank 0 tees stdout, rank 1 tees stderr.
rm -rf "$T/logs"; run --log-dir "$T/logs" --tee 0:1,1:2
[ "$(file 0 stdout)" = "out 0" ] && [ "$(file 1 stderr)" = "err 1" ] || fail "-t map: files"
[ -z "$(file 0 stderr)" ] && [ -z "$(file 1 stdout)" ] || fail "-t map: unlisted streams written"
grep -qx '\[default/0\]:out 0' "$T/out" && grep -qx '\[default/1\]:out 1' "$T/out" || fail "-t map: console lost lines"
echo "ok: --tee map"

# --local-ranks-filter 1: only rank 1 on the console; files unaffected.
rm -rf "$T/logs"; run --log-dir "$T/logs" -t 3 --local-ranks-filter 1
grep -q 'default/0' "$T/out" "$T/err" && fail "--local-ranks-filter: rank 0 on the console"
grep -qx '\[default/1\]:out 1' "$T/out" || fail "--local-ranks-filter: rank 1 missing"
[ "$(file 0 stdout)" = "out 0" ] || fail "--local-ranks-filter: rank 0's file"
echo "ok: --local-ranks-filter"

# -r without --log-dir: a fresh directory, announced.
TMPDIR=$T run -r 3
d=$(sed -n 's/^dtrun: worker logs in //p' "$T/err")
[ -n "$d" ] && [ "$(cat "$d/attempt_0/1/stdout.log")" = "out 1" ] || { cat "$T/err"; fail "-r without --log-dir"; }
echo "ok: -r without --log-dir"

# A restart writes attempt_1; an unwritable --log-dir is one line, exit 1.
timeout -k 2 20 "$DTRUN" --nproc-per-node=1 --rdzv-id=logtest --max-restarts=1 --log-dir "$T/logs2" -- \
  sh -c 'echo try $TORCHELASTIC_RESTART_COUNT; [ $TORCHELASTIC_RESTART_COUNT = 1 ]' >/dev/null 2>&1 || fail "restart run"
[ "$(cat "$T/logs2/logtest/attempt_1/0/stdout.log")" = "try 1" ] || fail "attempt_1 log"
timeout -k 2 20 "$DTRUN" --nproc-per-node=1 --log-dir /proc/nope -- true 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "/proc/nope" "$T/err" || { cat "$T/err"; fail "unwritable log dir: exit $rc"; }
echo "ok: attempts and an unwritable directory"
