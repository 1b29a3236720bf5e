#!/usr/bin/env bash
# Bad flags: one line on stderr naming what and why, exit 2, nothing started.
# --help / --version / no arguments; Slurm's environment read or refused.
source "$(dirname "$0")/../helpers/launch_common.bash"
bad() { # EXPECTED-SUBSTRING DTRUN-ARGS...
  local want=$1; shift
  timeout -k 2 10 "$DTRUN" "$@" >"$T/out" 2>"$T/err"; local rc=$?
  [ $rc -eq 2 ] || { cat "$T/err"; fail "dtrun $* exited $rc, want 2"; }
  [ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err"; fail "dtrun $*: want exactly one line on stderr"; }
  grep -qF -- "$want" "$T/err" || fail "dtrun $*: '$(cat "$T/err")' lacks '$want'"
  [ ! -s "$T/out" ] || fail "dtrun $*: printed on stdout"
}
bad "dtrun: unknown option '--nproc-per-nod'; did you mean '--nproc-per-node'?" --nproc-per-nod=8 -- true
bad "did you mean '--max_restarts'?" --max_restart 1 -- true
bad "--rdzv-endpoint: '::1' looks like an IPv6 address; write it in brackets" --rdzv-endpoint ::1 -- true
bad "--nnodes=2 needs --rdzv-endpoint" --nnodes=2 -- true
bad "--nproc-per-node=gpu: this machine has no GPU" --nproc-per-node=gpu -- true
bad "--nproc-per-node: 'eight' is not a whole number" --nproc-per-node=eight -- true
bad "--rdzv-conf: unknown key 'join_timout'; did you mean 'join_timeout'?" --rdzv-conf join_timout=1 -- true
bad "--tee: '5' is not 0-3" --tee 5 -- true
bad "nothing to run" --nproc-per-node=2
bad "'--' must be followed by a program" --nproc-per-node=2 --
bad "/nonexistent.yaml" /nonexistent.yaml
bad "nothing to run: give a job file"
CUDA_VISIBLE_DEVICES= bad "no GPU" --nproc-per-node=gpu -- true
timeout 10 "$DTRUN" --help >"$T/out" 2>&1 && grep -q -- "--nproc-per-node" "$T/out" || fail "--help"
timeout 10 "$DTRUN" --version | grep -qE '^dtrun [0-9]+\.[0-9]+' || fail "--version"
echo "ok: bad flags"

# Slurm: a multi-node allocation outside an srun step is refused with advice;
# one node runs, its run id taken from the job.
SLURM_JOB_ID=77 SLURM_NNODES=4 SLURM_NODEID=0 SLURM_JOB_NODELIST='n[1-4]' \
  timeout 10 "$DTRUN" --nproc-per-node=1 -- true 2>"$T/err"
[ $? -eq 2 ] && grep -q "outside an srun step" "$T/err" || { cat "$T/err"; fail "Slurm batch step with 4 nodes"; }
SLURM_JOB_ID=77 SLURM_NNODES=1 SLURM_JOB_NODELIST=n1 \
  timeout 10 "$DTRUN" --nproc-per-node=2 -- sh -c 'echo id=$TORCHELASTIC_RUN_ID' >"$T/out" 2>&1
grep -q '^\[default/1\]:id=77$' "$T/out" || { cat "$T/out"; fail "Slurm job id as run id"; }
echo "ok: Slurm environment"
