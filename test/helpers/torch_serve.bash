# torch_serve.bash — sourced by tests that ask a PyTorch helper many questions
# (after test/parallel/lib.bash or anything that sets T and fail): one
# PyTorch start-up (2-4 s of CPU each) for all of them.
#
#   torch_serve_start NAME HELPER.py   starts the server (torch_serve.py) in
#                                      the background; without torch in
#                                      /usr/bin/python3 it says so and
#                                      returns 77 (the test skips), another
#                                      import error fails the test
#   NAME ARGS...                       the helper's command, as
#                                      `/usr/bin/python3 HELPER.py ARGS...`
#                                      would run it: its stdout, its stderr,
#                                      its exit status
#   torch_serve_stop                   ends the servers and waits for them
#                                      (so that their CPU time counts as the
#                                      test's: test/run.sh prints it)
# A server left running ends within a second of its test (it watches its
# parent). Calls run one at a time, in the order made.
torch_serve_start() { # NAME HELPER.py
  local name=$1 helper=$2 d=$T/torch-$1
  mkdir -p "$d" && mkfifo "$d/queue" || fail "torch_serve: cannot make $d/queue"
  /usr/bin/python3 "$ROOT/test/helpers/torch_serve.py" "$helper" "$d" &
  local pid=$!
  while [ ! -e "$d/ready" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      grep -q "No module named 'torch'" "$d/import.err" 2>/dev/null &&
        { echo "skip: /usr/bin/python3 cannot import torch (python3-torch is a test-only peer)"; return 77; }
      cat "$d/import.err" 2>/dev/null
      fail "torch_serve: $helper did not start"
    fi
    sleep 0.05
  done
  eval "$name() { torch_serve_call '$d' $pid \"\$@\"; }"
  TORCH_SERVE_PIDS="${TORCH_SERVE_PIDS:-} $pid:$d"
}
torch_serve_stop() {
  local p
  for p in ${TORCH_SERVE_PIDS:-}; do
    echo stop >"${p#*:}/queue"
    wait "${p%%:*}"
  done
  TORCH_SERVE_PIDS=
}
torch_serve_call() { # DIR PID ARGS...
  local d=$1 pid=$2 id
  shift 2
  id=call$BASHPID.$RANDOM$RANDOM
  printf '%s\0' "$@" >"$d/$id.req"
  echo "$id" >"$d/queue"
  while [ ! -e "$d/$id.rc" ]; do
    kill -0 "$pid" 2>/dev/null || fail "torch_serve: the server of $d died"
    sleep 0.02
  done
  cat "$d/$id.out"
  cat "$d/$id.err" >&2
  return "$(cat "$d/$id.rc")"
}
