#!/usr/bin/env bash
# The small ones of issue 15.15:
#  - --hardware h100 suggests the h100 profiles by prefix (h100-sxm), not h200;
#  - `dtrun script.py` says which python3 it runs (the first on PATH), one line;
#    without one on PATH, one line and exit 2;
#  - `dtrun rdzv --token-file FILE` keeps the token out of ps; agents present it
#    through DTRUN_RDZV_TOKEN; a missing file is one line, exit 2;
#  - test/run.sh leaves no dtrun-test.* directory behind when all pass.
source "$(dirname "$0")/../helpers/launch_common.bash"

"$DTRUN" --dry-run configs/quickstart.yaml --hardware h100 >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "unknown hardware 'h100' (known: .*); did you mean 'h100-sxm'?$" "$T/err" || { cat "$T/err"; fail "--hardware h100: exit $rc"; }
echo "ok: $(cat "$T/err")"

mkdir -p "$T/bin"
real=$(command -v python3) || fail "no python3 here"
printf '#!/bin/sh\nexec %s "$@"\n' "$real" >"$T/bin/python3"; chmod +x "$T/bin/python3"
printf 'import os\nprint("rank", os.environ["RANK"])\n' >"$T/hello.py"
PATH="$T/bin:$PATH" "$DTRUN" --nproc-per-node=1 "$T/hello.py" $MARK >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 0 ] || { cat "$T/err"; fail "script.py: exit $rc"; }
[ "$(grep -c "^dtrun: running $T/hello.py with $T/bin/python3 (the first python3 on PATH)$" "$T/err")" = 1 ] || { cat "$T/err"; fail "script.py: no line naming the interpreter"; }
grep -qx "\[default/0\]:rank 0" "$T/out" || fail "script.py did not run"
echo "ok: $(cat "$T/err")"
PATH=/nonexistent "$DTRUN" "$T/hello.py" >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "no python3 on PATH" "$T/err" || { cat "$T/err"; fail "no python3: exit $rc"; }
echo "ok: $(cat "$T/err")"

printf 's3cr3t-%s\n' "$MARK" >"$T/token"
"$DTRUN" rdzv --listen 127.0.0.1:0 --token-file "$T/token" --port-file "$T/port" --quiet >"$T/rdzv.out" 2>"$T/rdzv.err" &
daemon=$!
wait_for '[ -s '"$T"'/port ] && echo y' y 10 || { cat "$T/rdzv.err"; fail "the daemon did not start"; }
port=$(cat "$T/port")
! ps -o args= -p $daemon | grep -q s3cr3t || fail "the token shows in ps"
DTRUN_RDZV_TOKEN=s3cr3t-$MARK timeout -k 2 20 "$DTRUN" --nnodes=1 --rdzv-endpoint=127.0.0.1:$port -- true $MARK 2>"$T/a.err"; rc=$?
[ $rc = 0 ] || { cat "$T/a.err"; fail "an agent with the file's token: exit $rc"; }
DTRUN_RDZV_TOKEN=wrong timeout -k 2 20 "$DTRUN" --nnodes=1 --rdzv-endpoint=127.0.0.1:$port -- true $MARK 2>"$T/b.err"; rc=$?
[ $rc = 1 ] && grep -q "wrong job token" "$T/b.err" || { cat "$T/b.err"; fail "an agent with another token: exit $rc"; }
kill $daemon; wait $daemon 2>/dev/null
"$DTRUN" rdzv --listen 127.0.0.1:0 --token-file "$T/nofile" 2>"$T/err"; rc=$?
# (one line, pointing at dtrun rdzv --help, as for every other option)
[ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] &&
  grep -qx -- "dtrun rdzv: --token-file: cannot read '$T/nofile': No such file or directory (dtrun rdzv --help)" "$T/err" ||
  { cat "$T/err"; fail "missing token file: exit $rc"; }
echo "ok: --token-file: not in ps, the right token joins, a wrong one is refused; $(head -1 "$T/err")"

# test/run.sh with one tiny test, its logs under our TMPDIR
mkdir -p "$T/tmp"
TMPDIR=$T/tmp DTRUN_TEST_NO_SAN=1 DTRUN_TEST_FILTER='launch_standalone_nnodes' test/run.sh >"$T/run.out" 2>&1 || { cat "$T/run.out"; fail "test/run.sh failed"; }
[ -z "$(ls "$T/tmp")" ] || { ls "$T/tmp"; fail "test/run.sh left $(ls "$T/tmp") behind"; }
echo "ok: test/run.sh left nothing behind ($(tail -1 "$T/run.out"))"
