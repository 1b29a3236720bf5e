#!/usr/bin/env bash
# --max-restarts retries only what a restart can change (issue 15.3): a data
# file the worker cannot read (3), a checkpoint that cannot load (6), a program that is not found
# (127) end at once with one line saying why there is no restart, on every node
# of a multi-node job; a program's own other codes are still retried.
source "$(dirname "$0")/../helpers/launch_common.bash"

# run WANT_RC NAME DTRUN-ARGS...: dtrun with 3 restarts allowed
run() {
  local want=$1 name=$2; shift 2
  timeout -k 2 60 "$DTRUN" --max-restarts=3 "$@" >"$T/$name.out" 2>"$T/$name.err"; RC=$?
  [ $RC = "$want" ] || { tail "$T/$name.err"; fail "$name: dtrun exited $RC, want $want"; }
  ! grep -q "restarting the workers" "$T/$name.err" || { cat "$T/$name.err"; fail "$name: restarted"; }
  [ "$(grep -c "^dtrun: not restarting" "$T/$name.err")" = 1 ] || { cat "$T/$name.err"; fail "$name: no single 'not restarting' line"; }
  echo "ok: $name -> exit $RC, $(grep "^dtrun: not restarting" "$T/$name.err")"
}

# a data file the launcher's checks pass (it exists, its header is a shard's)
# but the worker refuses: 2 tokens, too short for one sequence
python3 -c 'import struct, sys; open(sys.argv[1], "wb").write(struct.pack("<3i", 20240520, 1, 2) + bytes(1012 + 4))' \
  "$T/notokens.bin"
sed -e 's/^  kind: synthetic/  kind: tokens\n  train: '"${T//\//\\/}"'\/notokens.bin/' test/parallel/gpt-tiny.yaml >"$T/nodata.yaml"
run 3 "bad data" --nproc-per-node=1 "$T/nodata.yaml"
grep -q "rank 0 exited with status 3" "$T/bad data.err" || fail "the line does not name the rank and status"

# a checkpoint whose index the launcher's checks read fine but whose shard is
# corrupt: the worker's load fails (6)
cp test/parallel/gpt-tiny.yaml "$T/nockpt.yaml"
sed -i -e 's/^  steps: .*/  steps: 1/' "$T/nockpt.yaml"
printf 'checkpoint:\n  dir: %s/ck\n' "$T" >>"$T/nockpt.yaml"
"$DTRUN" --nproc-per-node=1 "$T/nockpt.yaml" >/dev/null 2>&1 || fail "could not make the checkpoint"
shard=$(ls "$T"/ck/step_*/rank_00000.safetensors | head -1)
printf 'Z' | dd of="$shard" bs=1 seek=$(( $(stat -c %s "$shard") / 2 )) conv=notrunc status=none
sed -i -e 's/^  steps: .*/  steps: 2/' "$T/nockpt.yaml"
run 6 "corrupt checkpoint" --nproc-per-node=1 "$T/nockpt.yaml"

run 127 "program not found" --nproc-per-node=2 -- /nonexistent/program $MARK

# Two nodes: node 1's worker is not found; node 0 hears it and does not restart either.
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=1 --rdzv-endpoint=127.0.0.1:$port --rdzv-id=nr$MARK --max-restarts=3
        --rdzv-conf=join_timeout=20,heartbeat_timeout=2,keep_alive_interval=0.5)
timeout -k 2 40 "$DTRUN" "${common[@]}" --node-rank=0 -- sh -c 'exec sleep 30' $MARK >"$T/n0.out" 2>"$T/n0.err" &
n0=$!
timeout -k 2 40 "$DTRUN" "${common[@]}" --node-rank=1 -- /nonexistent/program $MARK >"$T/n1.out" 2>"$T/n1.err"; r1=$?
wait $n0; r0=$?
[ $r1 = 127 ] || { cat "$T/n1.err"; fail "two nodes: the failing node exited $r1, want 127"; }
[ $r0 = 1 ] || { cat "$T/n0.err"; fail "two nodes: the other node exited $r0, want 1"; }
for n in n0 n1; do
  ! grep -q "restarting the workers" "$T/$n.err" || { cat "$T/$n.err"; fail "two nodes: $n restarted"; }
  grep -q "^dtrun: not restarting" "$T/$n.err" || { cat "$T/$n.err"; fail "two nodes: $n has no 'not restarting' line"; }
done
echo "ok: two nodes: neither restarts; node 0: $(grep "^dtrun: not restarting" "$T/n0.err")"

# What a restart may fix still restarts: a program's own status 3.
timeout -k 2 30 "$DTRUN" --max-restarts=1 --nproc-per-node=1 -- sh -c 'exit 3' $MARK >"$T/own.out" 2>"$T/own.err"; rc=$?
[ $rc = 3 ] && grep -q "restarting the workers (restart 1 of 1)" "$T/own.err" || { cat "$T/own.err"; fail "a program's own status 3 was not retried (exit $rc)"; }
echo "ok: a program's own status 3 is retried"
