# launch_common.bash — shared by test/integration/launch_*.sh (not a test itself).
# Sets DTRUN, T (a temp dir removed at exit), MARK (a word unique to this test
# run, put in worker command lines so pgrep finds exactly our processes), and
# builds the KV barrier helper into $T/kv_barrier.
set -u
cd "$(dirname "$0")/../.."
DTRUN=$PWD/bin/dtrun
[ -x "$DTRUN" ] || { echo "bin/dtrun is not built (make all)"; exit 1; }
T=$(mktemp -d /tmp/dtrun-launch.XXXXXX)
MARK=dtrunmark$$x$RANDOM

cleanup() {
  # Only processes this test started carry $MARK; end them by pid.
  local p
  for p in $(pgrep -f "$MARK" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; exit 1; }

build_kv_barrier() {
  # Compiled here, against the library, so the Makefile needs no test-only rule.
  gcc -std=c11 -D_GNU_SOURCE -O1 -I. test/helpers/kv_barrier.c build/libdtrun.a \
      $(pkg-config --libs yaml-0.1 libuv openblas zlib libxxhash libcjson 2>/dev/null) -fopenmp -lm \
      -o "$T/kv_barrier" || fail "cannot build test/helpers/kv_barrier.c"
}

# A TCP port free right now.
free_port() {
  python3 "$FREE_PORT_PY"
}
FREE_PORT_PY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/free_port.py

# wait_for COUNT_CMD WANT SECONDS: poll until the command prints WANT.
wait_for() {
  local i
  for i in $(seq 1 $(( $3 * 20 ))); do
    [ "$(eval "$1")" = "$2" ] && return 0
    sleep 0.05
  done
  return 1
}

# Worker processes of this test (pgrep on the marker), the agents excluded.
count_workers() { # AGENT_PID...
  local n=0 p
  for p in $(pgrep -f "$MARK"); do
    case " $* " in *" $p "*) ;; *) n=$((n + 1));; esac
  done
  echo $n
}

# start_agent DTRUN-ARGS... : runs dtrun in the background as $AGENT (the real
# dtrun pid, so signals reach it, not a timeout(1) wrapper), with a watchdog
# that kills it after ${AGENT_LIMIT:-30} s so a test never hangs.
start_agent() {
  "$DTRUN" "$@" >"$T/out" 2>"$T/err" &
  AGENT=$!
  # Its own output goes nowhere: a sleeping watchdog must not hold the test's pipe.
  ( sleep "${AGENT_LIMIT:-30}" && kill -9 $AGENT ) >/dev/null 2>&1 &
  WATCHDOG=$!
}
# wait_agent: waits for $AGENT, sets RC, stops the watchdog.
wait_agent() {
  wait $AGENT; RC=$?
  pkill -P $WATCHDOG 2>/dev/null; kill $WATCHDOG 2>/dev/null; wait $WATCHDOG 2>/dev/null
  return 0
}
