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
# The tests' python3 (hundreds of starts: compare.py per layout, the JSON and
# shard checks) is Debian's when there is one (make deps installs it: the
# PyTorch peers run on it): 0.02 s a start, where a pyenv shim found first on
# PATH costs ~0.25 s of CPU each (a bash script, then site's imports).
# Only the standard library is asked of it; PyTorch is asked of /usr/bin/python3
# by name.
if [ -x /usr/bin/python3 ] && [ "$(command -v python3)" != /usr/bin/python3 ]; then
  mkdir -p "$log/bin" && ln -s /usr/bin/python3 "$log/bin/python3" && export PATH="$log/bin:$PATH"
fi

# Tests run DTRUN_TEST_JOBS at a time (default: the cores, at least 2: most
# integration tests wait on processes, sockets and python peers more than they
# compute): the known-long ones first (LONG_FIRST below, the slowest first,
# so that the slots end together instead of one long test running alone at
# the end), then the unit binaries, the sanitizer builds and the integration
# scripts in name order. An integration test whose header says
# "# dtrun-test: waits" (it mostly sleeps: timeouts, Slurm's and the
# rendezvous' waits; little CPU) runs in a side lane beside the pool, one at
# a time, without taking a slot; one that says "# dtrun-test: exclusive"
# (it times the machine: calibration, measured bubbles, a skip when others
# take the cores) runs afterwards, alone. Each prints its line as it ends
# (wall seconds, and CPU seconds of the test and its children) and leaves
# "kind passed failed" in result/.
jobs=${DTRUN_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
[ "$jobs" -ge 2 ] 2>/dev/null || jobs=2

# cpu_secs: sets cpu to the user + system seconds of this shell's finished
# children (each test runs in a subshell of its own, so: the test's). Not
# called as $(cpu_secs): that would ask a subshell, which has no children.
cpu_secs() {
  local a b f="$log/times.$BASHPID"
  times >"$f"
  { read -r _ _; read -r a b; } <"$f"
  rm -f "$f"
  cpu=$(awk -v a="$a" -v b="$b" 'function s(x) { sub(/s$/, "", x); split(x, p, "m"); return p[1] * 60 + p[2] }
    BEGIN { printf "%.1fs", s(a) + s(b) }')
}
run_unit() { # name binary: counts its "ok -" / "not ok -" lines
  local name=$1 bin=$2 out="$log/$(echo "$1" | tr '/' '_').log" rc p f start took cpu
  start=$(date +%s)
  # OpenMP's idle threads sleep instead of spinning (as dtrun's agent asks of
  # its workers): two tests share two cores here, and a spinning thread
  # starves the one doing the work (ASan test_kernels: 55 s instead of 2 s
  # when the other slot is busy)
  OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} timeout -k 5 "$DTRUN_TEST_TIMEOUT" "$bin" >"$out" 2>&1; rc=$?
  cpu_secs; took="$(( $(date +%s) - start ))s, $cpu CPU"
  p=$(grep -c '^ok - ' "$out"); f=$(grep -c '^not ok - ' "$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "not ok - $name exited $rc" >>"$out"; fi
  echo "unit $p $f" >"$log/result/$(echo "$name" | tr '/' '_')"
  if [ "$f" -gt 0 ]; then
    echo "FAIL $name ($p passed, $f failed; $took)"; grep -E '^not ok|ERROR|Sanitizer|runtime error' "$out" | head -20 | sed 's/^/    /'
  else
    echo "PASS $name ($p checks; $took)"
  fi
}
run_san_unit() {
  DTRUN_TEST_SAN=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_unit "$@"
}
run_integration() { # script name: exit 0 passed, 77 skipped, else failed
  local t=$1 name=$2 out="$log/$(basename "$1").log" start rc secs cpu
  start=$(date +%s)
  timeout -k 5 "$DTRUN_TEST_TIMEOUT" bash "$t" >"$out" 2>&1; rc=$?
  cpu_secs; secs="$(( $(date +%s) - start ))s, $cpu CPU"
  echo "integration $rc" >"$log/result/$(echo "$name" | tr '/' '_')"
  if [ $rc -eq 0 ]; then echo "PASS $name ($secs)"
  elif [ $rc -eq 77 ]; then echo "SKIP $name: $(tail -1 "$out")"
  else echo "FAIL $name (exit $rc, $secs)"; tail -25 "$out" | sed 's/^/    /'; fi
}
pool=() # the pids of the tests running in the pool
start_job() { # FUNCTION ARGS...: in the background once a slot is free
  local done_pid p left=()
  if [ "${#pool[@]}" -ge "$jobs" ]; then # a slot frees when one of the pool's own ends (not the side lane)
    wait -n -p done_pid "${pool[@]}"
    for p in "${pool[@]}"; do [ "$p" = "$done_pid" ] || left+=("$p"); done
    pool=("${left[@]}")
  fi
  "$@" &
  pool+=($!)
}

# The known-long tests (CPU seconds of make test on a 2-core machine under
# load, branch testtime2 of 2026-11-28), the longest first: a name missing
# here runs in name order after them.
LONG_FIRST=(
  unit/test_published integration/quickstart_bf16 integration/tokenizer_json integration/parallel_equivalence
  integration/ep integration/parallel_llama asan/test_published asan/test_plan integration/memory_bf16
  integration/parallel_bf16 unit/test_comm asan/test_comm integration/sft_tokenize integration/cuda_graphs
  integration/offload integration/ckpt_resume integration/parallel_cp integration/lora integration/sft_pack
  integration/ckpt_faults asan/test_tokenizer integration/docs_drift integration/tp_overlap
  integration/launch_host_race
)
declare -A queued=()
jobs_all=() # "function name target" in name order
add_job() { # function name target
  [[ $2 =~ $filter ]] || return 0
  jobs_all+=("$1 $2 $3")
}
start_named() { # function name target
  if [ "$1" = run_integration ]; then start_job "$1" "$3" "$2"; else start_job "$1" "$2" "$3"; fi
  queued[$2]=1
}
for bin in build/test/test_*; do
  [ -x "$bin" ] && add_job run_unit "unit/$(basename "$bin")" "$bin"
done
if [ "${DTRUN_TEST_NO_SAN:-0}" != 1 ]; then
  for bin in build-san/test/test_*; do
    [ -x "$bin" ] && add_job run_san_unit "asan/$(basename "$bin")" "$bin"
  done
fi
exclusive=() waits=()
for t in test/integration/*.sh; do
  [ -f "$t" ] || continue
  name=integration/$(basename "$t" .sh)
  [[ $name =~ $filter ]] || continue
  if grep -q '^# dtrun-test: exclusive' "$t"; then exclusive+=("$t"); continue; fi
  if grep -q '^# dtrun-test: waits' "$t"; then waits+=("$t"); continue; fi
  add_job run_integration "$name" "$t"
done
# the side lane: the tests that mostly wait, one after another, beside the pool
side_lane() {
  local t
  for t in "$@"; do (run_integration "$t" "integration/$(basename "$t" .sh)"); done
}
[ ${#waits[@]} -eq 0 ] || side_lane "${waits[@]}" &
for long in "${LONG_FIRST[@]}"; do
  for j in "${jobs_all[@]}"; do
    read -r fn name target <<<"$j"
    [ "$name" = "$long" ] && start_named "$fn" "$name" "$target"
  done
done
for j in "${jobs_all[@]}"; do
  read -r fn name target <<<"$j"
  [ -n "${queued[$name]:-}" ] || start_named "$fn" "$name" "$target"
done
wait
for t in "${exclusive[@]}"; do (run_integration "$t" "integration/$(basename "$t" .sh)"); done
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
