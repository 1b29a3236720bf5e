#!/usr/bin/env bash
# train.offload (issue 17): [optimizer]: AdamW's m and v and an fp32 master
# live in host memory and the host steps them (runtime/optim/optim.h);
# [optimizer, params] (FSDP / HSDP): the parameter shards too, each unit
# brought to a gather buffer from the host (runtime/parallel/fsdp.c).
# 1. The same run bitwise: each layout with and without offload gives the same
#    losses at every step and the same final parameters (DTRUN_DUMP_PARAMS):
#    the same arithmetic in the same order, only elsewhere.
# 2. Memory: with offload the device holds no optimizer state and no master
#    (nor parameters with params; measured by the runtime's accounting,
#    account.h), they appear in the host pool instead, the other categories
#    stay (but for the gather buffers a one-rank FSDP needs with params), and
#    the dry-run predicts both pools to the byte.
# 3. Checkpoints: a run stopped and resumed with offload is bitwise the run in
#    one go (the state is saved from and loaded into host memory).
source "$(dirname "$0")/../parallel/ckpt.bash"

# a layout, and what it offloads (1: optimizer, 2: optimizer and params, 3:
# activations, 4: all three); activations run 6 layers (5 block inputs to move)
LAYOUTS=(
  "pp=1|1"
  "pp=1 prec=bf16|1"
  "dp=2 mode=zero1 prec=bf16|1"
  "dp=2 mode=fsdp|1"
  "pp=2 sched=1f1b prec=bf16 grad=fp32|1"
  "tp=2|1"
  "dp=2 mode=fsdp|2"
  "dp=2 mode=fsdp prec=bf16 grad=fp32|2"
  "mode=fsdp prec=bf16|2"
  "dp=2 tp=2 mode=fsdp|2"
  "dp=2 pp=2 sched=1f1b mode=fsdp prec=bf16|2"
  "pp=1 recompute=block|3"
  "pp=1 recompute=block prec=bf16|3"
  "pp=2 sched=1f1b recompute=block|3"
  "tp=2 sp=1 recompute=block|3"
  "cp=2 recompute=block|3"
  "dp=2 mode=fsdp recompute=block prec=bf16 grad=fp32|4"
)
for entry in "${LAYOUTS[@]}"; do
  lay=${entry%|*} what=${entry#*|}
  for off in 0 "$what"; do
    name=$(layout_name "$lay offload=$off"); d=$T/$name
    layout_job gpt-tiny "$lay offload=$off" "$d.yaml" "$d.jsonl"
    sed -i -e 's/^  steps: .*/  steps: 8/' "$d.yaml"
    case $what in 3|4) sed -i -e 's/^  n_layer: .*/  n_layer: 6/' "$d.yaml" ;; esac
    ckpt_run "$lay" "$d.yaml" "$d.log" DTRUN_DUMP_PARAMS="$d.bin" || { tail "$d.log"; fail "[$lay offload=$off] did not train"; }
    "$DTRUN" --dry-run --hardware cpu --format=json "$d.yaml" >"$d.dry.json" 2>"$d.dry.err" ||
      { cat "$d.dry.err"; fail "[$lay offload=$off]: dry-run failed"; }
  done
  a=$T/$(layout_name "$lay offload=0"); b=$T/$(layout_name "$lay offload=$what")
  lay="$lay offload=$what"
  cmp -s "$a.bin" "$b.bin" || fail "[$lay]: final parameters differ with offload"
  same_losses "$a.jsonl" "$b.jsonl" >/dev/null || fail "[$lay]: losses differ with offload"
  python3 - "$a" "$b" "$lay" "$what" <<'PY' || fail "[$lay]: memory with offload is not what the dry-run says"
import glob, json, sys
a, b, lay, what = sys.argv[1:5]
moving = (["optimizer", "master"] if what != "3" else []) + (["params"] if what in "24" else [])
acts = what in "34"  # the block inputs leave the device; its working set gains their buffers
def last(stem, r):
    return [json.loads(l) for l in open(f"{stem}.rank{r}.jsonl") if l.strip()][-1]["mem_peak"]
ranks = len(glob.glob(f"{b}.rank*.jsonl"))
dry = json.load(open(f"{b}.dry.json"))["stages"]
ok, saved_any = True, 0
for r in range(ranks):
    m0, m1 = last(a, r), last(b, r)
    # the stage (pp rank) of rank r: ranks are tp fastest, then dp, then pp
    st = dry[0] if len(dry) == 1 else dry[r // (ranks // len(dry))]
    d = st["memory_by_tp_rank"][0]
    moved = sum(m0[c] for c in moving)
    saved = m0["activations"] - m1["activations"] if acts else 0
    # the rest stays; a one-rank FSDP with params gains its gather buffers (buffers)
    stay = [c for c in m0 if c not in moving + ["host", "total"] + (["buffers"] if what in "24" else []) +
            (["activations"] if acts else [])]
    good = (all(m1[c] == 0 for c in moving) and m1["host"] > moved and all(m1[c] == m0[c] for c in stay) and
            m1["host"] == d["host"] and m1["total"] == d["allocated"] and saved >= 0 and
            m0["total"] - m1["total"] == moved + saved - (m1["buffers"] - m0["buffers"]))
    ok &= good
    saved_any += saved
    print(("ok   " if good else "FAIL ") + f"[{lay}] rank {r}: device {m0['total']} -> {m1['total']} bytes "
          f"({' + '.join(f'{c} {m0[c]}' for c in moving)}{f' + activations {saved}' if acts else ''} left it; "
          f"buffers {m0['buffers']} -> {m1['buffers']}), "
          f"host {m1['host']}; dry-run: device {d['allocated']}, host {d['host']}")
# activations: a rank with few blocks per micro-batch may only break even (two
# working buffers for the entries it sends away), but the device saves overall
if acts and not saved_any > 0:
    print(f"FAIL [{lay}]: no rank's device holds fewer activation bytes")
    ok = False
sys.exit(0 if ok else 1)
PY
  echo "ok   [$lay]: with offload bitwise the same run"
done

# 3. stop at step 20 and resume, with offload
ckpt_exact gpt-tiny "dp=2 mode=zero1 prec=bf16 offload=1"
ckpt_exact gpt-tiny "pp=1 offload=1"
ckpt_exact gpt-tiny "dp=2 mode=fsdp prec=bf16 offload=2"
echo "PASS offload"
