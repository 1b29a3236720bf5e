#!/usr/bin/env bash
# A PyTorch script with init_method="env://" runs under dtrun unchanged: rank 0
# creates its TCPStore at MASTER_ADDR:MASTER_PORT (a free port, not the daemon's),
# 2 ranks all_reduce over gloo and meet at a barrier. Skips without Debian's torch.
source "$(dirname "$0")/../helpers/launch_common.bash"
PY=/usr/bin/python3
timeout 60 $PY -c 'import torch.distributed' 2>/dev/null || { echo "python3-torch is not installed"; exit 77; }
cat >"$T/ddp.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
dist.barrier()
print(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {int(t.item())} "
      f"local {os.environ['LOCAL_RANK']} restart {os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
dist.destroy_process_group()
PY
timeout -k 2 80 "$DTRUN" --nproc-per-node=2 -- $PY "$T/ddp.py" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/out" "$T/err"; fail "dtrun exited $rc"; }
for r in 0 1; do
  grep -qx "\[default/$r\]:rank $r of 2 sum 3 local $r restart 0" "$T/out" || { cat "$T/out"; fail "rank $r"; }
done
echo "ok: torch.distributed env:// with gloo, 2 ranks"
