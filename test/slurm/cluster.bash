# cluster.bash — a private two-node Slurm on this machine, for
# test/integration/slurm.sh (sourced, not run; needs root and Debian's
# slurm-wlm + munge). No systemd: the daemons are started directly, as children
# of the test's shell: one munged on its own socket, slurmctld, and two slurmd
# (`slurmd -N n1`, `slurmd -N n2`; Debian builds Slurm with multiple-slurmd
# support). Everything lives under one directory and one slurm.conf, given to
# daemons and clients by SLURM_CONF; nothing global is read or changed (the
# caller makes the node names n1 and n2 resolve).
#
#   slurm_cluster_start DIR   0 once both nodes are idle; else 1 with SLURM_WHY
#                             (one line) and the daemons' logs under DIR/log
#   sl CMD [ARGS...]          runs a Slurm client command against this cluster
#   slurm_cluster_stop        cancels every job, stops the daemons by pid and
#                             kills (by pid) whatever still runs with this
#                             cluster's SLURM_CONF in its environment
#   slurm_cluster_logs        the last lines of every daemon's log

SLURM_DIR='' SLURM_CONF_FILE='' SLURM_WHY=''
SLURM_PIDS=() SLURM_NAMES=() # munged, slurmctld, slurmd n1, slurmd n2

sl() { SLURM_CONF=$SLURM_CONF_FILE timeout -k 2 15 "$@"; }

# A TCP port on 127.0.0.1 that nothing listens on (tried by connecting).
_slurm_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
_slurm_pick_port() { # EXCLUDED... -> a free port in 20000..28999
  local p i
  for i in $(seq 1 100); do
    p=$((20000 + RANDOM % 9000))
    case " $* " in *" $p "*) continue;; esac
    _slurm_port_free "$p" && { echo "$p"; return 0; }
  done
  return 1
}

_slurm_alive() { kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]; }

# The first error a daemon logged (LOG-NAME, e.g. slurmd.n1), for SLURM_WHY;
# every daemon's when no name is given. Known noise is left out.
_slurm_first_error() {
  grep -h -iE 'error|fatal' "$SLURM_DIR"/log/${1:-*}.log "$SLURM_DIR"/log/${1:-*}.out 2>/dev/null |
    grep -v -E 'pmix|MPI: Cannot create context|Domain socket directory|hwloc|job state file|Trying backup state|Socket is inaccessible' |
    head -1
}

slurm_cluster_start() { # DIR
  local d=$1 i p
  SLURM_DIR=$d SLURM_CONF_FILE=$d/slurm.conf SLURM_WHY=
  mkdir -p "$d/munge" "$d/state" "$d/spool/n1" "$d/spool/n2" "$d/log" || { SLURM_WHY="cannot create $d"; return 1; }
  chmod 755 "$d" "$d/munge" # munged wants its socket's directory searchable by all

  # munge: a fresh key, readable by root only, and a munged on its own socket.
  if command -v mungekey >/dev/null; then
    mungekey -c -k "$d/munge/munge.key" 2>"$d/log/mungekey.out"
  else
    dd if=/dev/urandom of="$d/munge/munge.key" bs=128 count=1 2>/dev/null
  fi
  chmod 600 "$d/munge/munge.key"
  munged -F --force -S "$d/munge/munge.socket.2" --key-file="$d/munge/munge.key" \
    --log-file="$d/log/munged.log" --pid-file="$d/munge/munged.pid" \
    --seed-file="$d/munge/munged.seed" >"$d/log/munged.out" 2>&1 &
  SLURM_PIDS=($!) SLURM_NAMES=(munged)
  for i in $(seq 1 100); do
    munge -S "$d/munge/munge.socket.2" -n 2>/dev/null | unmunge -S "$d/munge/munge.socket.2" >/dev/null 2>&1 && break
    _slurm_alive "${SLURM_PIDS[0]}" || break
    sleep 0.05
  done
  munge -S "$d/munge/munge.socket.2" -n 2>/dev/null | unmunge -S "$d/munge/munge.socket.2" >/dev/null 2>&1 || {
    SLURM_WHY="munged did not start: $(tail -1 "$d/log/munged.log" "$d/log/munged.out" 2>/dev/null | grep . | tail -1)"
    return 1
  }

  # Ports: slurmctld's and one per slurmd, all free now; the first job id so
  # that the rendezvous ports of the next jobs (29400 + id mod 1000) are free.
  local cp n1p n2p jid
  cp=$(_slurm_pick_port) && n1p=$(_slurm_pick_port "$cp") && n2p=$(_slurm_pick_port "$cp" "$n1p") ||
    { SLURM_WHY="no free TCP port for slurmctld/slurmd"; return 1; }
  for i in $(seq 1 100); do
    jid=$((1000 + RANDOM * 30 + RANDOM % 30))
    local ok=1 k
    for k in 0 1 2 3 4; do _slurm_port_free $((29400 + (jid + k) % 1000)) || ok=0; done
    [ $ok = 1 ] && break
  done
  sed -e "s|@DIR@|$d|g" -e "s|@CTLD_PORT@|$cp|" -e "s|@N1_PORT@|$n1p|" -e "s|@N2_PORT@|$n2p|" \
      -e "s|@FIRST_JOB_ID@|$jid|" test/slurm/slurm.conf.in >"$SLURM_CONF_FILE"

  SLURM_CONF=$SLURM_CONF_FILE slurmctld -D >"$d/log/slurmctld.out" 2>&1 &
  SLURM_PIDS+=($!) SLURM_NAMES+=(slurmctld)
  SLURM_CONF=$SLURM_CONF_FILE slurmd -D -N n1 >"$d/log/slurmd.n1.out" 2>&1 &
  SLURM_PIDS+=($!) SLURM_NAMES+=(slurmd.n1)
  SLURM_CONF=$SLURM_CONF_FILE slurmd -D -N n2 >"$d/log/slurmd.n2.out" 2>&1 &
  SLURM_PIDS+=($!) SLURM_NAMES+=(slurmd.n2)

  # Up when both nodes are idle (about 1.5 s); give up after 30 s, or at once
  # when a daemon has died.
  local st='' k
  for i in $(seq 1 300); do
    st=$(sl sinfo -h -N -o '%N=%t' 2>/dev/null | sort -u | tr '\n' ' ')
    [ "$st" = "n1=idle n2=idle " ] && return 0
    for k in "${!SLURM_PIDS[@]}"; do
      _slurm_alive "${SLURM_PIDS[k]}" || {
        SLURM_WHY="${SLURM_NAMES[k]/./ -N } exited: $(_slurm_first_error "${SLURM_NAMES[k]}")"
        return 1
      }
    done
    sleep 0.1
  done
  SLURM_WHY="the nodes did not become idle in 30 s (sinfo: ${st:-nothing}): $(_slurm_first_error)"
  return 1
}

slurm_cluster_stop() {
  [ -n "$SLURM_DIR" ] || return 0
  local p i ids
  # Cancel every job while slurmctld runs, and give the steps time to end.
  if [ ${#SLURM_PIDS[@]} -ge 2 ] && _slurm_alive "${SLURM_PIDS[1]}"; then
    ids=$(sl squeue -h -o %i 2>/dev/null)
    if [ -n "$ids" ]; then
      sl scancel $ids 2>/dev/null
      for i in $(seq 1 100); do
        [ -z "$(sl squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.1
      done
    fi
  fi
  # The daemons: slurmd, then slurmctld, then munged; SIGKILL after 5 s.
  for ((i = ${#SLURM_PIDS[@]} - 1; i >= 0; i--)); do kill "${SLURM_PIDS[i]}" 2>/dev/null; done
  for i in $(seq 1 50); do
    local left=0
    for p in "${SLURM_PIDS[@]}"; do _slurm_alive "$p" && left=1; done
    [ $left = 0 ] && break
    sleep 0.1
  done
  for p in "${SLURM_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  # Whatever else still carries this cluster's SLURM_CONF (a slurmstepd, srun,
  # a job's processes) was started through it: end it by pid.
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] || [ "$p" = "$BASHPID" ] && continue
    grep -qzx "SLURM_CONF=$SLURM_CONF_FILE" "/proc/$p/environ" 2>/dev/null && kill -9 "$p" 2>/dev/null
  done
  SLURM_PIDS=() SLURM_NAMES=() SLURM_DIR=
}

slurm_cluster_logs() {
  local f
  for f in "$SLURM_DIR"/log/*.log; do
    [ -f "$f" ] || continue
    echo "---- $f (last lines)"
    grep -v -E 'pmix|MPI: Cannot create context' "$f" | tail -n 15
  done
}
