#!/usr/bin/env bash
# Three "nodes" in three network namespaces joined by a bridge (10.77.0.1-3),
# one job over real addresses: the agent on 10.77.0.1 hosts the daemon (it owns
# the endpoint's address), the others join from their own network stacks; 3 x 2
# workers meet at one KV barrier; MASTER_ADDR is a real address all agree on.
# With Debian's torch, a gloo all_reduce across the namespaces checks that
# MASTER_ADDR:MASTER_PORT is reachable from every node. Needs root and ip(8).
source "$(dirname "$0")/../helpers/launch_common.bash"
source "$(dirname "$0")/../helpers/netns.bash"
netns_setup 3
build_kv_barrier

run_nodes() { # NPROC PROGRAM... ; writes $T/n{0,1,2}.{out,err}, sets RCS
  local nproc=$1 i pids=(); shift
  for i in 2 1 0; do   # node 0 last: the others retry until the host listens
    ip netns exec ${NS[$i]} env GLOO_SOCKET_IFNAME=eth0 timeout -k 2 60 "$DTRUN" --nnodes=3 \
      --nproc-per-node=$nproc --rdzv-endpoint=10.77.0.1:29400 --rdzv-id=netns$NETNS_ID -- "$@" \
      >"$T/n$i.out" 2>"$T/n$i.err" &
    pids[$i]=$!
  done
  RCS=""
  for i in 0 1 2; do wait ${pids[$i]}; RCS="$RCS $?"; done
}
W='echo "rank $RANK/$WORLD_SIZE node $GROUP_RANK master $MASTER_ADDR:$MASTER_PORT kv $DTRUN_KV_ENDPOINT"; exec '"$T"'/kv_barrier netns 30'
run_nodes 2 sh -c "$W"
[ "$RCS" = " 0 0 0" ] || { tail -n 5 "$T"/n*.err; fail "exit statuses:$RCS"; }
grep -q "listening on" "$T/n0.err" || fail "the agent on 10.77.0.1 did not host the daemon"
! grep -q "listening on" "$T/n1.err" "$T/n2.err" || fail "an agent without the endpoint's address hosted"
ranks=$(cat "$T"/n*.out | sed -n 's/^\[default\/[0-9]*\]:rank \([0-9]*\)\/6 .*/\1/p' | sort -n | tr '\n' ' ')
[ "$ranks" = "0 1 2 3 4 5 " ] || { cat "$T"/n*.out; fail "ranks: $ranks"; }
[ "$(cat "$T"/n*.out | grep -c 'kv_barrier: rank . of 6 passed netns')" = 6 ] || fail "not all 6 ranks met"
masters=$(cat "$T"/n*.out | sed -n 's/.* master \([^ ]*\) kv.*/\1/p' | sort -u)
[ "$(echo "$masters" | wc -l)" = 1 ] && [[ $masters == 10.77.0.* ]] || fail "MASTER_ADDR:PORT not one real address: $masters"
kvs=$(cat "$T"/n*.out | sed -n 's/.* kv \(.*\)$/\1/p' | sort -u)
[ "$kvs" = "10.77.0.1:29400" ] || fail "DTRUN_KV_ENDPOINT: $kvs"
echo "ok: 3 namespaces x 2 workers, one barrier, master $masters"

if timeout 60 /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  cat >"$T/ddp.py" <<'PY'
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} sum {int(t.item())}", flush=True)
dist.destroy_process_group()
PY
  run_nodes 1 /usr/bin/python3 "$T/ddp.py"
  [ "$RCS" = " 0 0 0" ] || { tail -n 8 "$T"/n*.err; fail "torch across namespaces:$RCS"; }
  [ "$(cat "$T"/n*.out | grep -c 'sum 6$')" = 3 ] || { cat "$T"/n*.out; fail "all_reduce across namespaces"; }
  echo "ok: torch gloo all_reduce across 3 namespaces"
fi
