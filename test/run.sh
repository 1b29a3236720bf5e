#!/usr/bin/env bash
# Runs every test and ends with the line "N passed, N failed".
#  - unit tests: build/test/test_* (and build-san/test/test_* under ASan+UBSan);
#    each prints "ok - ..." / "not ok - ..." lines, counted one by one; a binary
#    that dies or prints nothing counts as one failure.
#  - integration tests: test/integration/*.sh; exit 0 = passed, 77 = skipped.
# DTRUN_TEST_FILTER=regex runs only the matching tests.
set -u
cd "$(dirname "$0")/.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
# make test checks the CPU backend (layout equivalence is defined on it in
# fp32): GPUs hidden, train.device auto resolves to cpu on a GPU box too.
# make test-gpu (test/gpu/run.sh) is where the GPU is tested.
export CUDA_VISIBLE_DEVICES=
# make test-full (DTRUN_TEST_FULL=1) adds the whole layout matrix: a longer limit.
if [ "${DTRUN_TEST_FULL:-0}" = 1 ]; then export DTRUN_TEST_TIMEOUT=${DTRUN_TEST_TIMEOUT:-7200}; fi
export DTRUN_TEST_TIMEOUT=${DTRUN_TEST_TIMEOUT:-600}
pass=0 fail=0 skip=0
log=$(mktemp -d "${TMPDIR:-/tmp}/dtrun-test.XXXXXX")
# checkpoints remember data hashes (provenance): in the run's own folder, not ~/.cache
export DTRUN_CACHE_DIR=${DTRUN_CACHE_DIR:-$log/cache}
filter=${DTRUN_TEST_FILTER:-.}
mkdir -p "$log/result"

# Tests run DTRUN_TEST_JOBS at a time (default: the cores, at least 2: most
# integration tests wait on processes, sockets and python peers more than they
# compute), unit binaries first, then the sanitizer builds, then the
# integration scripts; an integration test whose header says
# "# dtrun-test: exclusive" (it times the machine: calibration, measured
# bubbles, a skip when others take the cores) runs afterwards, alone. Each
# prints its line as it ends and leaves "kind passed failed" in result/.
jobs=${DTRUN_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
[ "$jobs" -ge 2 ] 2>/dev/null || jobs=2

run_unit() { # name binary: counts its "ok -" / "not ok -" lines
  local name=$1 bin=$2 out="$log/$(echo "$1" | tr '/' '_').log" rc p f
  timeout -k 5 "$DTRUN_TEST_TIMEOUT" "$bin" >"$out" 2>&1; rc=$?
  p=$(grep -c '^ok - ' "$out"); f=$(grep -c '^not ok - ' "$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "not ok - $name exited $rc" >>"$out"; fi
  echo "unit $p $f" >"$log/result/$(echo "$name" | tr '/' '_')"
  if [ "$f" -gt 0 ]; then
    echo "FAIL $name ($p passed, $f failed)"; grep -E '^not ok|ERROR|Sanitizer|runtime error' "$out" | head -20 | sed 's/^/    /'
  else
    echo "PASS $name ($p checks)"
  fi
}
run_san_unit() {
  DTRUN_TEST_SAN=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_unit "$@"
}
run_integration() { # script name: exit 0 passed, 77 skipped, else failed
  local t=$1 name=$2 out="$log/$(basename "$1").log" start rc secs
  start=$(date +%s)
  timeout -k 5 "$DTRUN_TEST_TIMEOUT" bash "$t" >"$out" 2>&1; rc=$?
  secs=$(( $(date +%s) - start ))
  echo "integration $rc" >"$log/result/$(echo "$name" | tr '/' '_')"
  if [ $rc -eq 0 ]; then echo "PASS $name (${secs}s)"
  elif [ $rc -eq 77 ]; then echo "SKIP $name: $(tail -1 "$out")"
  else echo "FAIL $name (exit $rc, ${secs}s)"; tail -25 "$out" | sed 's/^/    /'; fi
}
running=0
start_job() { # FUNCTION ARGS...: in the background once a slot is free
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
  "$@" &
  running=$((running + 1))
}

for bin in build/test/test_*; do
  [ -x "$bin" ] || continue
  name=unit/$(basename "$bin")
  [[ $name =~ $filter ]] && start_job run_unit "$name" "$bin"
done
if [ "${DTRUN_TEST_NO_SAN:-0}" != 1 ]; then
  for bin in build-san/test/test_*; do
    [ -x "$bin" ] || continue
    name=asan/$(basename "$bin")
    [[ $name =~ $filter ]] && start_job run_san_unit "$name" "$bin"
  done
fi
exclusive=()
for t in test/integration/*.sh; do
  [ -f "$t" ] || continue
  name=integration/$(basename "$t" .sh)
  [[ $name =~ $filter ]] || continue
  if grep -q '^# dtrun-test: exclusive' "$t"; then exclusive+=("$t"); continue; fi
  start_job run_integration "$t" "$name"
done
wait
for t in "${exclusive[@]}"; do run_integration "$t" "integration/$(basename "$t" .sh)"; done
for r in "$log"/result/*; do
  [ -f "$r" ] || continue
  read -r kind a b <"$r"
  if [ "$kind" = unit ]; then pass=$((pass + a)); fail=$((fail + b))
  elif [ "$a" -eq 0 ]; then pass=$((pass + 1)); elif [ "$a" -eq 77 ]; then skip=$((skip + 1)); else fail=$((fail + 1)); fi
done
# The logs matter only when something failed: keep them then, else leave nothing behind.
if [ $fail -eq 0 ]; then rm -rf "$log"; else echo "logs: $log (kept: $fail failed)"; fi
if [ $skip -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
[ $fail -eq 0 ]
