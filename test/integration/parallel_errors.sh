#!/usr/bin/env bash
# Errors are answers in the parallel engine: when a peer dies in the middle of
# training, every survivor stops within seconds with exit status 4 and one line
# naming its rank, the step and what failed — for data parallel (DDP buckets,
# FSDP gathers), tensor parallel and pipelines. Workers are started directly
# (`dtrun worker`, torchrun's variables, a file store), without the agent, so
# nothing else kills the survivors for us. Also: a world that does not match
# the layout is refused with one line.
source "$(dirname "$0")/../parallel/lib.bash"

# start_workers NAME WORLD: workers of $T/NAME.yaml in the background, pids in PIDS.
start_workers() {
  local name=$1 world=$2 r
  mkdir -p "$T/$name.store"
  PIDS=()
  for ((r = 0; r < world; r++)); do
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world DTRUN_STORE=file:$T/$name.store \
      DTRUN_COMM_TIMEOUT=30 "$DTRUN" worker "$T/$name.yaml" >"$T/$name.$r.out" 2>"$T/$name.$r.err" &
    PIDS+=($!)
  done
}

# peer_dies NAME LAYOUT VICTIM: train a long run, SIGKILL rank VICTIM once
# training is under way, expect exit 4 and one line from every other rank.
peer_dies() {
  local name=$1 lay=$2 victim=$3 world r start
  world=$(( $(lget "$lay" dp 1) * $(lget "$lay" tp 1) * $(lget "$lay" pp 1) ))
  layout_job gpt-tiny "$lay" "$T/$name.yaml" "$T/$name.jsonl"
  sed -i -e 's/^  steps: .*/  steps: 100000/' -e "s/^  n_layer: .*/  n_layer: $(layout_layers "$lay")/" "$T/$name.yaml"
  start_workers "$name" "$world"
  for _ in $(seq 1 200); do [ -s "$T/$name.jsonl" ] && break; sleep 0.05; done
  [ -s "$T/$name.jsonl" ] || { cat "$T/$name".*.err; fail "$name: training did not start"; }
  sleep 0.3
  kill -9 "${PIDS[$victim]}"
  start=$(date +%s)
  for ((r = 0; r < world; r++)); do
    [ $r -eq $victim ] && { wait "${PIDS[$r]}" 2>/dev/null; continue; }
    local rc=0
    # a watchdog: a survivor that hangs fails the test instead of hanging it
    bash -c 'sleep 40; kill -9 "$1"' watchdog "${PIDS[$r]}" >/dev/null 2>&1 &
    local dog=$!
    wait "${PIDS[$r]}" || rc=$?
    kill -9 "$dog" 2>/dev/null
    [ $rc -eq 4 ] || { cat "$T/$name.$r.err"; fail "$name: rank $r exited $rc, want 4 (communication error)"; }
    # the one error line (rank 0 also announced its layout at the start)
    local lines; lines=$(grep -v '^dtrun: layout ' "$T/$name.$r.err" | grep -c .)
    [ "$lines" = 1 ] || { cat "$T/$name.$r.err"; fail "$name: rank $r printed $lines lines, want one"; }
    grep -Eq "^dtrun: rank $r: (step [0-9]+|pp rank [0-9]+: step [0-9]+)" "$T/$name.$r.err" ||
      { cat "$T/$name.$r.err"; fail "$name: rank $r's line does not name its rank and step"; }
  done
  local secs=$(( $(date +%s) - start ))
  [ $secs -le 20 ] || fail "$name: survivors took ${secs}s to stop"
  echo "ok: $name [$lay], rank $victim killed: survivors exit 4 in ${secs}s: $(grep -hv '^dtrun: layout' "$T/$name".*.err | head -1)"
}

peer_dies ddp "dp=2" 1
peer_dies fsdp "dp=4 mode=fsdp" 2
peer_dies tp "tp=2 dp=2" 3
peer_dies pp "pp=2 sched=1f1b" 0

# a world that does not match the layout
layout_job gpt-tiny "dp=4" "$T/bad.yaml" "$T/bad.jsonl"
rc=0; RANK=0 WORLD_SIZE=2 "$DTRUN" worker "$T/bad.yaml" >"$T/bad.out" 2>"$T/bad.err" || rc=$?
[ $rc -eq 1 ] || fail "a world of 2 for dp=4 exited $rc, want 1"
grep -q "parallel.dp 4 x tp 1 x pp 1 = 4 workers, but 2 are started (WORLD_SIZE)" "$T/bad.err" || { cat "$T/bad.err"; fail "no line about the world"; }
echo "ok: a world that does not match the layout: $(head -1 "$T/bad.err")"
