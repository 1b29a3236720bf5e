#!/usr/bin/env bash
# torchrun parity for programs (issue 25.11):
#  - every worker of a program gets TORCHELASTIC_ERROR_FILE, a file of its own
#    (DIR/RUN_ID/attempt_N/RANK/error.json under --log-dir, else
#    attempt_N.rank_RANK.json in a private temp dir gone when dtrun returns);
#  - a worker that writes an error there in PyTorch's format (what @record
#    writes) and fails: the root-cause line quotes the traceback's last line,
#    and so do the restart reason and dtrun's own TORCHELASTIC_ERROR_FILE (with
#    the errorCode), as torchrun's @record main does;
#  - --run-path runs a script with runpy.run_path and records its exception in
#    that file without torch; -m runs a module; both with python3 -u (as torchrun);
#    PYTHON_EXEC picks the interpreter; -m with --no-python or --run-path is refused;
#  - with Debian's torch: a script with @record, the real thing.
source "$(dirname "$0")/../helpers/launch_common.bash"
command -v python3 >/dev/null || fail "no python3"
mkdir -p "$T/tmp"
export TMPDIR=$T/tmp

# 1. One file per worker; none left in TMPDIR; beside the logs under --log-dir.
"$DTRUN" --nproc-per-node=2 -- sh -c 'echo "ef=$TORCHELASTIC_ERROR_FILE"' $MARK >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "run 1"; }
for r in 0 1; do
  grep -Eqx "\[default/$r\]:ef=$T/tmp/dtrun-errors-[A-Za-z0-9]{6}/attempt_0.rank_$r.json" "$T/out" || { cat "$T/out"; fail "rank $r: TORCHELASTIC_ERROR_FILE"; }
done
[ -z "$(ls -A "$T/tmp")" ] || fail "left in TMPDIR: $(ls "$T/tmp")"
"$DTRUN" --nproc-per-node=1 --log-dir="$T/logs" --rdzv-id=myrun -- sh -c 'echo "ef=$TORCHELASTIC_ERROR_FILE"' $MARK >"$T/out" 2>"$T/err" || fail "run 1b"
grep -qx "\[default/0\]:ef=$T/logs/myrun/attempt_0/0/error.json" "$T/out" || { cat "$T/out"; fail "--log-dir: TORCHELASTIC_ERROR_FILE"; }
echo "ok: one TORCHELASTIC_ERROR_FILE per worker, temp dir removed, beside the logs under --log-dir"

# 2. An error file in PyTorch's format (no torch needed to write one): rank 1
# fails on the first attempt; the second attempt reads the restart reason.
cat >"$T/fail.py" <<'PY'
import json, os, sys, time, traceback
rank, attempt = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
if attempt == "1":
    print("reason:", os.environ.get("DTRUN_RESTART_REASON"), flush=True)
    sys.exit(0 if rank != "1" else 3)
if rank == "1":
    try:
        raise KeyError("shard 7")
    except KeyError as e:
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump({"message": {"message": f"{type(e).__name__}: {e}",
                       "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}, f)
    sys.exit(1)
time.sleep(30)
PY
TORCHELASTIC_ERROR_FILE=$T/parent.json "$DTRUN" --nproc-per-node=2 --max-restarts=1 --log-dir="$T/logs2" --rdzv-id=r2 \
  -- python3 "$T/fail.py" $MARK >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 3 ] || { cat "$T/err"; fail "run 2: exit $rc, want 3 (rank 1's second status)"; }
grep -q "^dtrun:   rank 1 (local rank 1, .*), attempt 0, .*: exited with status 1: KeyError: 'shard 7'$" "$T/err" ||
  { cat "$T/err"; fail "the root-cause line does not quote the traceback's last line"; }
grep -qx "dtrun:   error file: $T/logs2/r2/attempt_0/1/error.json" "$T/err" || { cat "$T/err"; fail "no error file line under --log-dir"; }
grep -qx "\[default/1\]:reason: rank 1 exited with status 1: KeyError: 'shard 7'" "$T/out" || { cat "$T/out"; fail "DTRUN_RESTART_REASON"; }
# the last failure (attempt 1, status 3) wrote no file: the parent's is the
# file of the failure that ended the job, so none here; then one that has it.
[ ! -e "$T/parent.json" ] || fail "dtrun's own TORCHELASTIC_ERROR_FILE written for a failure without an error file"
TORCHELASTIC_ERROR_FILE=$T/parent.json "$DTRUN" --nproc-per-node=2 -- python3 "$T/fail.py" $MARK >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 1 ] || { cat "$T/err"; fail "run 2b: exit $rc"; }
python3 - "$T/parent.json" <<'PY' || fail "dtrun's own TORCHELASTIC_ERROR_FILE: $(cat "$T/parent.json")"
import json, sys
m = json.load(open(sys.argv[1]))["message"]
assert m["message"] == "KeyError: 'shard 7'" and m["errorCode"] == 1, m
assert m["extraInfo"]["py_callstack"].startswith("Traceback"), m
PY
echo "ok: the root cause, the restart reason and dtrun's own error file quote \"KeyError: 'shard 7'\""

# 3. --run-path: runpy.run_path in python3 -u, the exception recorded without torch.
mkdir -p "$T/pkg"
cat >"$T/pkg/job.py" <<'PY'
import os, sys, time
ready = os.path.join(os.path.dirname(__file__), "rank0-ready")
print("argv", sys.argv, "name", __name__, "unbuffered", int("-u" in sys.orig_argv), flush=True)
if os.environ["RANK"] == "0":
    open(ready, "w").close()
else:
    for _ in range(400):
        if os.path.exists(ready): break
        time.sleep(0.05)
    raise RuntimeError("loss is nan at step 3")
PY
"$DTRUN" --nproc-per-node=2 --run-path "$T/pkg/job.py" a b $MARK >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 1 ] || { cat "$T/err"; fail "--run-path: exit $rc, want 1"; }
grep -qx "\[default/0\]:argv \['$T/pkg/job.py', 'a', 'b', '$MARK'\] name __main__ unbuffered 1" "$T/out" || { cat "$T/out"; fail "--run-path: argv/name/-u"; }
grep -q "^dtrun:   rank 1 .*: exited with status 1: RuntimeError: loss is nan at step 3$" "$T/err" || { cat "$T/err"; fail "--run-path: the root cause does not quote the exception"; }
grep -q "^dtrun: running $T/pkg/job.py with .* (the first python3 on PATH)$" "$T/err" || { cat "$T/err"; fail "--run-path: no interpreter line"; }
echo "ok: --run-path runs the script as __main__ with its argv, python3 -u, and its exception is the root cause"

# 4. -m: a module, python3 -u -m; PYTHON_EXEC names the interpreter.
printf 'import sys\nprint("mod", __name__, sys.argv[1:], "unbuffered", int("-u" in sys.orig_argv))\n' >"$T/pkg/hello.py"
touch "$T/pkg/__init__.py"
printf '#!/bin/sh\necho via-wrapper >&2\nexec python3 "$@"\n' >"$T/py"; chmod +x "$T/py"
(cd "$T" && PYTHON_EXEC=$T/py "$DTRUN" --nproc-per-node=1 -m pkg.hello x y) >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "-m: exit $?"; }
grep -qx "\[default/0\]:mod __main__ \['x', 'y'\] unbuffered 1" "$T/out" || { cat "$T/out" "$T/err"; fail "-m: not run as python3 -u -m"; }
grep -qx "dtrun: running pkg.hello with $T/py (PYTHON_EXEC)" "$T/err" && grep -q "via-wrapper" "$T/err" || { cat "$T/err"; fail "PYTHON_EXEC"; }
echo "ok: -m runs python3 -u -m MODULE; PYTHON_EXEC picks the interpreter"

# 5. torchrun's refusals: one line, exit 2.
for args in "-m --no-python pkg.hello" "--run-path -m pkg.hello" "--run-path"; do
  "$DTRUN" $args >"$T/out" 2>"$T/err"; rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err"; fail "'$args': exit $rc, want 2 and one line"; }
  echo "ok: '$args': $(cat "$T/err")"
done

# 6. The real @record, with Debian's torch.
PY=/usr/bin/python3
if timeout 60 $PY -c 'import torch.distributed.elastic.multiprocessing.errors' 2>/dev/null; then
  cat >"$T/rec.py" <<'PY'
import os
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("rank 1 cannot go on: bad shard 7")
main()
PY
  "$DTRUN" --nproc-per-node=2 -- $PY "$T/rec.py" $MARK >"$T/out" 2>"$T/err"; rc=$?
  [ $rc = 1 ] || { cat "$T/err"; fail "@record: exit $rc"; }
  grep -q "^dtrun:   rank 1 .*: exited with status 1: ValueError: rank 1 cannot go on: bad shard 7$" "$T/err" ||
    { cat "$T/err"; fail "@record: the root cause does not quote the traceback's last line"; }
  echo "ok: torch's @record: $(grep '^dtrun:   rank 1' "$T/err")"
else
  echo "python3-torch is not installed: the @record case is skipped"
fi
[ -z "$(ls -A "$T/tmp")" ] || fail "left in TMPDIR: $(ls "$T/tmp")"
echo "PASS launch_torchelastic"
