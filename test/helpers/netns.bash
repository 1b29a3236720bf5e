# netns.bash — "nodes" as network namespaces, for integration tests that need
# real addresses (sourced after a file that defines fail and cleanup).
#
# netns_setup N: namespaces ${NS[0..N-1]} with eth0 = 10.77.0.(i+1)/24, joined by
# a bridge that lives in a namespace of its own ($HUB), so the host's network is
# untouched. Exits 77 (skip) without root, ip(8) or namespace support. Removes
# everything at exit (and calls the test's own cleanup).
netns_setup() {
  local n=$1 i ns
  [ "$(id -u)" = 0 ] && command -v ip >/dev/null || { echo "needs root and iproute2"; exit 77; }
  NETNS_ID=$$
  HUB=dthub$NETNS_ID
  NS=()
  for ((i = 0; i < n; i++)); do NS+=("dtn$i$NETNS_ID"); done
  ip netns add $HUB 2>/dev/null || { echo "cannot create network namespaces here"; exit 77; }
  trap netns_cleanup EXIT
  ip -n $HUB link add br0 type bridge && ip -n $HUB link set br0 up && ip -n $HUB link set lo up || fail "bridge"
  for ((i = 0; i < n; i++)); do
    ns=${NS[$i]}
    ip netns add $ns || fail "netns $ns"
    ip link add dtv$i$NETNS_ID type veth peer name dtp$i$NETNS_ID || fail "veth"
    ip link set dtv$i$NETNS_ID netns $ns && ip link set dtp$i$NETNS_ID netns $HUB || fail "move veth"
    ip -n $ns link set dtv$i$NETNS_ID name eth0 && ip -n $ns addr add 10.77.0.$((i + 1))/24 dev eth0 &&
      ip -n $ns link set eth0 up && ip -n $ns link set lo up || fail "address in $ns"
    ip -n $HUB link set dtp$i$NETNS_ID master br0 && ip -n $HUB link set dtp$i$NETNS_ID up || fail "bridge port"
  done
}

netns_cleanup() {
  local n
  for n in "${NS[@]}" $HUB; do ip netns del $n 2>/dev/null; done
  cleanup
}
