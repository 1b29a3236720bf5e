#!/usr/bin/env bash
# Every malformed job in test/jobspec/bad/ makes `dtrun --print-config` exit 2
# with exactly one line on stderr, "dtrun: FILE:LINE:COL: ...", holding the
# substring of the file's first-line comment "# expect: ..." at the position of
# its second-line comment "# at: LINE:COL"; nothing on stdout. A missing file
# gives "FILE: cannot open (...)". Every job in test/jobspec/good/ loads, and
# its printed form loads back and prints the same.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${DTRUN_BIN:-bin/dtrun}
if [ ! -x "$bin" ]; then echo "$bin is not built (make all)"; exit 77; fi

tmp=$(mktemp -d /tmp/jobspec_errors.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0 checked=0

fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

# run FILE: sets rc, and leaves stdout/stderr in $tmp/out, $tmp/err
run() {
  timeout 10 "$bin" --print-config "$1" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

expect_one_error() { # file what location-prefix
  local f=$1 want=$2 where=$3 lines msg
  run "$f"
  mapfile -t lines <"$tmp/err"  # bash builtins only: this loop runs 60 times
  msg=${lines[*]:0:3}
  checked=$((checked + 1))
  [ "$rc" -eq 2 ] || { fail "$f" "exit status $rc, expected 2 (stderr: $msg)"; return; }
  [ "${#lines[@]}" -eq 1 ] || { fail "$f" "${#lines[@]} lines on stderr, expected 1: $msg"; return; }
  [ ! -s "$tmp/out" ] || { fail "$f" "output on stdout"; return; }
  [[ $msg == "dtrun: $where"* ]] || { fail "$f" "expected to start with 'dtrun: $where', got: $msg"; return; }
  [[ $msg == *"$want"* ]] || { fail "$f" "expected '$want', got: $msg"; return; }
}

nbad=0
for f in test/jobspec/bad/*.yaml; do
  nbad=$((nbad + 1))
  { IFS= read -r first; IFS= read -r second; } <"$f"
  want=${first#\# expect: } at=${second#\# at: }
  if [ "$want" = "$first" ] || [ -z "$want" ]; then fail "$f" "first line is not '# expect: <substring>'"; continue; fi
  if ! [[ $at =~ ^[0-9]+:[0-9]+$ ]]; then fail "$f" "second line is not '# at: LINE:COL'"; continue; fi
  expect_one_error "$f" "$want" "$f:$at: "
done
[ "$nbad" -ge 35 ] || fail test/jobspec/bad "only $nbad malformed jobs, expected at least 35"

# A missing file and a directory: no position, the system's reason.
expect_one_error "$tmp/no-such-job.yaml" "cannot open (No such file or directory)" "$tmp/no-such-job.yaml: "
expect_one_error "$tmp" "cannot read (Is a directory)" "$tmp: "

# Every good job loads; its printed form is a job file that prints the same.
for f in test/jobspec/good/*.yaml; do
  checked=$((checked + 1))
  run "$f"
  if [ "$rc" -ne 0 ] || [ -s "$tmp/err" ] || [ ! -s "$tmp/out" ]; then
    fail "$f" "exit $rc, stderr: $(head -c 300 "$tmp/err")"
    continue
  fi
  cp "$tmp/out" "$tmp/printed.yaml"
  run "$tmp/printed.yaml"
  if [ "$rc" -ne 0 ] || ! cmp -s "$tmp/out" "$tmp/printed.yaml"; then
    fail "$f" "printed job does not load back the same (exit $rc): $(head -c 300 "$tmp/err")"
  fi
done

# A bf16 job (train.precision: bf16, mixed precision) is a valid job that
# trains: exit 0 and a step line; its dry-run works too.
printf 'model: {kind: gpt, n_layer: 1, n_head: 1, d_model: 8, vocab_size: 8, seq_len: 4}\ntrain: {steps: 1, global_batch: 1, precision: bf16}\n' >"$tmp/bf16.yaml"
checked=$((checked + 1))
timeout 20 "$bin" --nproc-per-node=1 "$tmp/bf16.yaml" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] || ! cat "$tmp/out" "$tmp/err" | grep -q "step 1/1 | loss"; then
  fail "$tmp/bf16.yaml" "bf16 training: exit $rc, stderr: $(head -c 300 "$tmp/err")"
fi
"$bin" --dry-run "$tmp/bf16.yaml" >/dev/null 2>&1 || fail "$tmp/bf16.yaml" "the dry-run of a bf16 job failed"

echo "$checked jobs checked, $failures failures"
[ "$failures" -eq 0 ]
