#!/usr/bin/env bash
# `dtrun plot`: two runs (dp 2, different learning rates) drawn into one SVG;
# Python's XML parser checks its structure (three panels with ticks, units,
# a line per run with as many points as the JSONL, per rank a memory line of
# the accounted bytes and one of the OS peak RSS, each rank marking its own
# points, captions saying what each panel plots, a legend with one entry per
# meaning that says which ranks are equal); headless Chromium renders it and
# the screenshot shows every run's colour in the loss and throughput panels
# and every rank's colour in the memory panel, though the two dp ranks have
# the same memory (test/plot/check_svg.py). Bad input: one line, its exit status.
# Without Chromium (Debian's chromium, installed by make deps) the structural
# checks still run, then the test skips (77) saying why.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${DTRUN_BIN:-bin/dtrun}
if [ ! -x "$bin" ]; then echo "$bin is not built (make all)"; exit 77; fi
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
T=$(mktemp -d /tmp/plot.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for lr in 1.0e-3 4.0e-3; do
  cat >"$T/j$lr.yaml" <<YAML
model: {kind: gpt, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 64, seq_len: 16}
data: {kind: synthetic}
train: {steps: 30, global_batch: 4, micro_batch: 2, lr: $lr, warmup: 3, eval_every: 10, eval_batches: 2}
parallel: {dp: 2}
log: {metrics: $T/runs/lr$lr.jsonl, progress: off}
YAML
  "$bin" --nproc-per-node=2 "$T/j$lr.yaml" >"$T/log" 2>&1 || { tail "$T/log"; fail "training lr $lr"; }
done
# the glob takes the rank files too: they are read as the runs' memory, not as runs
out=$("$bin" plot "$T"/runs/*.jsonl -o "$T/curves.svg" 2>&1) || { echo "$out"; fail "plot exited $?"; }
[ "$out" = "$T/curves.svg" ] || fail "plot printed '$out', not the SVG's path"
python3 test/plot/check_svg.py svg "$T/curves.svg" "$T/runs/lr1.0e-3.jsonl" "$T/runs/lr4.0e-3.jsonl" || exit 1

expect() { # STATUS WHAT ARGS...
  local want=$1 what=$2; shift 2
  "$bin" plot "$@" >"$T/out" 2>"$T/err"; local rc=$?
  [ "$rc" -eq "$want" ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -qF -- "$what" "$T/err" ||
    { cat "$T/err"; fail "plot $*: exit $rc (want $want) or not one line with '$what'"; }
  echo "ok: exit $rc: $(cat "$T/err")"
}
printf '{"step":1,"loss":2.0}\nnot json\n' >"$T/bad.jsonl"
printf '{"step":1,"rank":0}\n' >"$T/noloss.jsonl"
expect 3 "$T/none.jsonl: cannot read (No such file or directory)" "$T/none.jsonl" -o "$T/x.svg"
expect 3 "$T/bad.jsonl:2: not a JSON object" "$T/bad.jsonl" -o "$T/x.svg"
expect 3 "$T/noloss.jsonl: no step with a loss" "$T/noloss.jsonl" -o "$T/x.svg"
expect 1 "/proc/dtrun-no/x.svg: cannot write" "$T/runs/lr1.0e-3.jsonl" -o /proc/dtrun-no/x.svg
expect 2 "unknown option '--bogus'" --bogus "$T/runs/lr1.0e-3.jsonl" -o "$T/x.svg"
expect 2 "no output: give -o curves.svg" "$T/runs/lr1.0e-3.jsonl"
expect 2 "no metrics files" -o "$T/x.svg"
[ ! -e "$T/x.svg" ] || fail "a failed plot left a file"

chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then
  echo "skip: the SVG's structure passed, but Chromium is not installed (apt-get install chromium; make deps does) to render it"
  exit 77
fi
timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$T/chrome" \
  --window-size=1400,560 --screenshot="$T/shot.png" "file://$T/curves.svg" >"$T/chrome.log" 2>&1
[ -s "$T/shot.png" ] || { tail "$T/chrome.log"; fail "Chromium wrote no screenshot"; }
python3 test/plot/check_svg.py png "$T/shot.png" 2 2 || exit 1
echo PASS
