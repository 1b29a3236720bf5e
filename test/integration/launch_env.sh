#!/usr/bin/env bash
# 8 local workers: each prints its environment and meets the others at a KV
# barrier. Every torchrun variable and DTRUN_* twin is right for every rank,
# ranks 0..7 are unique, MASTER_PORT is not the daemon's port, output is prefixed.
source "$(dirname "$0")/../helpers/launch_common.bash"
build_kv_barrier
VARS='RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|ROLE_RANK|ROLE_WORLD_SIZE|ROLE_NAME|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_RESTART_COUNT|TORCHELASTIC_MAX_RESTARTS|TORCHELASTIC_RUN_ID|TORCHELASTIC_USE_AGENT_STORE|OMP_NUM_THREADS|DTRUN_[A-Z_]*'
start=$(date +%s%N)
env -u OMP_NUM_THREADS timeout -k 2 30 "$DTRUN" --nproc-per-node=8 -- sh -c \
  "env | grep -E '^($VARS)=' | sed 's/^/ENV /'; exec $T/kv_barrier envtest 20" >"$T/out" 2>"$T/err"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $rc -eq 0 ] || { cat "$T/err"; fail "dtrun exited $rc"; }
echo "8 workers ran and met in ${ms} ms"

declare -A VAL
while IFS= read -r line; do
  [[ $line =~ ^\[default/([0-9]+)\]:ENV\ ([A-Z_]+)=(.*)$ ]] || continue
  VAL[${BASH_REMATCH[1]}.${BASH_REMATCH[2]}]=${BASH_REMATCH[3]}
done <"$T/out"
get() { echo "${VAL[$1.$2]-}"; } # RANK NAME -> what that worker printed
cores=$(nproc)
omp=$(( cores / 8 )); [ $omp -ge 1 ] || omp=1
run_id=$(get 0 TORCHELASTIC_RUN_ID)
[ -n "$run_id" ] || fail "TORCHELASTIC_RUN_ID unset"
for r in 0 1 2 3 4 5 6 7; do
  for pair in RANK=$r LOCAL_RANK=$r WORLD_SIZE=8 LOCAL_WORLD_SIZE=8 GROUP_RANK=0 GROUP_WORLD_SIZE=1 \
              ROLE_RANK=$r ROLE_WORLD_SIZE=8 ROLE_NAME=default MASTER_ADDR=127.0.0.1 \
              TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_RUN_ID=$run_id \
              TORCHELASTIC_USE_AGENT_STORE=False OMP_NUM_THREADS=$omp; do
    name=${pair%%=*} want=${pair#*=}
    [ "${VAL[$r.$name]-}" = "$want" ] || fail "rank $r: $name='${VAL[$r.$name]-}', want '$want'"
    case $name in TORCHELASTIC_RESTART_COUNT) twin=DTRUN_RESTART_COUNT;; TORCHELASTIC_MAX_RESTARTS) twin=DTRUN_MAX_RESTARTS;;
                  TORCHELASTIC_RUN_ID) twin=DTRUN_RUN_ID;; TORCHELASTIC_USE_AGENT_STORE|OMP_NUM_THREADS) twin=;;
                  *) twin=DTRUN_$name;; esac
    [ -z "$twin" ] || [ "${VAL[$r.$twin]-}" = "$want" ] || fail "rank $r: $twin='${VAL[$r.$twin]-}', want '$want'"
  done
  mp=$(get $r MASTER_PORT) rp=$(get $r DTRUN_RDZV_PORT)
  [ -n "$mp" ] && [ "$mp" -gt 0 ] && [ "$mp" != "$rp" ] || fail "rank $r: MASTER_PORT '$mp' must be a port other than the daemon's ($rp)"
  [ "$mp" = "$(get 0 MASTER_PORT)" ] || fail "rank $r: MASTER_PORT differs from rank 0's"
  [ "$(get $r DTRUN_KV_ENDPOINT)" = "127.0.0.1:$rp" ] || fail "rank $r: DTRUN_KV_ENDPOINT '$(get $r DTRUN_KV_ENDPOINT)'"
  [ -n "$(get $r DTRUN_RDZV_TOKEN)" ] && [ -n "$(get $r DTRUN_KV_PREFIX)" ] || fail "rank $r: token or KV prefix unset"
  grep -qx "\[default/$r\]:kv_barrier: rank $r of 8 passed envtest" "$T/out" || fail "rank $r did not pass the barrier"
done
n=$(grep -c '^\[default/[0-7]\]:ENV RANK=' "$T/out")
uniq=$(sed -n 's/^\[default\/[0-7]\]:ENV RANK=//p' "$T/out" | sort -u | tr '\n' ' ')
[ "$n" = 8 ] && [ "$uniq" = "0 1 2 3 4 5 6 7 " ] || fail "ranks not unique: $uniq ($n lines)"
grep -v '^\[default/[0-7]\]:' "$T/out" && fail "an unprefixed line on stdout"
# OMP_NUM_THREADS from the user's environment is kept.
OMP_NUM_THREADS=3 timeout -k 2 20 "$DTRUN" --nproc-per-node=2 -- sh -c 'echo omp=$OMP_NUM_THREADS' >"$T/out2" 2>&1
grep -q '^\[default/1\]:omp=3$' "$T/out2" || { cat "$T/out2"; fail "OMP_NUM_THREADS from the environment was not kept"; }
echo "ok: 8 ranks, every variable, unique ranks, KV barrier"
