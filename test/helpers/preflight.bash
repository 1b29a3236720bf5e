# preflight.bash — shared by the tests of what dtrun checks before it spawns
# (test/integration/preflight_*.sh, jobspec_layout.sh; not a test itself).
# Sets DTRUN, T (a temp dir removed at exit) and gives tiny jobs and one-line
# error checks. Every job here trains in well under a second.
set -u
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
DTRUN=${DTRUN_BIN:-$PWD/bin/dtrun}
[ -x "$DTRUN" ] || { echo "bin/dtrun is not built (make all)"; exit 1; }
T=$(mktemp -d /tmp/dtrun-preflight.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok - $*"; }
finish() { [ "$failures" -eq 0 ] && echo "all passed" || { echo "$failures failed"; exit 1; }; }

# tiny_job FILE [EXTRA-YAML-LINES...]: a 2-layer GPT on synthetic tokens, 4 steps.
tiny_job() {
  local f=$1; shift
  { echo "model: {kind: gpt, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 32, seq_len: 8}"
    echo "train: {steps: 4, global_batch: 4, lr: 0.01}"
    local l; for l in "$@"; do echo "$l"; done; } >"$f"
}

# run_dtrun NAME ARGS...: runs dtrun (20 s limit), stdout in $T/NAME.out,
# stderr in $T/NAME.err, exit status in $rc.
run_dtrun() {
  local name=$1; shift
  timeout -k 2 20 "$DTRUN" "$@" >"$T/$name.out" 2>"$T/$name.err"; rc=$?
}

# expect_one_line NAME STATUS PREFIX SUBSTRING...: the last run_dtrun NAME exited
# STATUS with exactly one line on stderr that starts with PREFIX and holds
# every SUBSTRING, and started no worker (no "[default/" prefixed output).
expect_one_line() {
  local name=$1 want_rc=$2 prefix=$3; shift 3
  local n msg; n=$(wc -l <"$T/$name.err"); msg=$(head -c 600 "$T/$name.err")
  [ "$rc" -eq "$want_rc" ] || { fail "$name: exit $rc, expected $want_rc: $msg"; return 1; }
  [ "$n" -eq 1 ] || { fail "$name: $n lines on stderr, expected 1: $msg"; return 1; }
  [[ $msg == "$prefix"* ]] || { fail "$name: expected to start with '$prefix': $msg"; return 1; }
  local s; for s in "$@"; do [[ $msg == *"$s"* ]] || { fail "$name: no '$s' in: $msg"; return 1; }; done
  if grep -q '^\[default/' "$T/$name.out" "$T/$name.err"; then fail "$name: a worker was started"; return 1; fi
  ok "$name: $msg"
}
