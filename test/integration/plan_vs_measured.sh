#!/usr/bin/env bash
# The dry-run against the run (issue 6; DESIGN.md "one source of truth for
# costs"): for a dozen layouts of a small GPT (and a ViT) on the CPU backend,
# `dtrun --dry-run --format json` predicts each rank's peak memory by category
# and the run measures it (account.h, STEM.rankN.jsonl). Memory: goal within
# 5 %, fails above 10 %. test/parallel/plan_compare.py prints the table and
# decides. Peak memory does not depend on the load, so this part runs in
# test/run.sh's pool; the pipeline bubbles, which time the machine, are
# plan_vs_measured_bubble.sh's (run alone, after the others).
source "$(dirname "$0")/../parallel/lib.bash"

source "$(dirname "$0")/../parallel/pvm.bash"

NAMES=()
BUSY=0.15 # of one core: more, and the run did not have a core per rank
measure single             "m=2"
measure dp2-ddp            "dp=2"
measure dp2-zero1          "dp=2 mode=zero1"
measure dp2-zero2-accum2   "dp=2 mode=zero2 m=2"
measure dp4-fsdp           "dp=4 mode=fsdp"
measure dp2-fsdp-recompute "dp=2 mode=fsdp recompute=block"
measure tp2                "tp=2"
# selective recompute drops the probabilities naive attention keeps; fused
# keeps none, so its selective run is its none run
measure tp2-naive          "tp=2 attn=naive"
measure tp2-selective      "tp=2 recompute=selective attn=naive"
measure tp2-selective-fused "tp=2 recompute=selective"
measure dp2-tp2            "dp=2 tp=2"
measure tp2-sp             "tp=2 sp=1"
measure tp2-pp2-sp         "tp=2 pp=2 m=2 sp=1"
# 67 vocab rows over tp 2: 33 on tp rank 0, 34 on rank 1. A stage's figure is
# its worst tp rank's (sizes_worst_tp_rank): exact for rank 1, one wte row (and
# its gradient, Adam state, logits column, tied scratch row) above rank 0.
measure tp2-pp2-vocab67    "tp=2 pp=2 m=2 mode=zero1 vocab=67"
measure vit-dp2-zero2      "kind=vit dp=2 mode=zero2"
measure dp2-pp2-zero1      "dp=2 pp=2 mode=zero1 m=4"
# interleaved with m = 2p: a rank's two chunks hold 5 (rank 0) and 3 (rank 1)
# micro-batches at once, fewer than their own peaks' 4 + 2 and 2 + 2, so their
# stashes come from one pool of the rank (pp_exec.h), in bf16 too; with block
# recompute rank 1's head chunk stashes more than its other chunk, so 3 of the
# head chunk's size would be more than 2 + 2 of their own: it keeps them apart.
# The chunks share one scratch in all three.
measure pp2-interleaved    "pp=2 sched=interleaved m=4"
measure pp2-interleaved-bf16 "pp=2 sched=interleaved m=4 prec=bf16"
measure pp2-interleaved-recompute "pp=2 sched=interleaved m=4 recompute=block"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(getconf _NPROCESSORS_ONLN) cores"
python3 "$ROOT/test/parallel/plan_compare.py" --busy "$BUSY" "$T" "${NAMES[@]}"; rc=$?
# Selective recompute against none on the same layout, measured. Naive
# attention: one set of attention probabilities [mb, heads / tp, seq, seq] for
# the 4 blocks instead of one each, so 3 x 2 x 2 x 32 x 32 floats fewer
# activations on every rank. Fused: nothing kept to drop, the same bytes.
# Fused against naive: each block keeps [mb, heads / tp, seq] lse instead of
# the probabilities, and the working set a [mb x seq, 4 d / tp] kv scratch
# instead of a [mb, heads / tp, seq, seq] backward scratch.
python3 - "$T" <<'EOF_PY' || rc=1
import json, sys
d = sys.argv[1]
def acts(name, r):
    rows = [json.loads(l) for l in open(f"{d}/{name}.rank{r}.jsonl") if l.strip()]
    return rows[-1]["mem_peak"]["activations"]
tt, lse, kv = 2 * 2 * 32 * 32 * 4, 2 * 2 * 32 * 4, 2 * 32 * 4 * 32 * 4
want = 3 * tt
for r in range(2):
    none, sel = acts("tp2-naive", r), acts("tp2-selective", r)
    fused, fsel = acts("tp2", r), acts("tp2-selective-fused", r)
    print(f"tp2 rank {r} activations, naive attention: none {none / 1024:.1f} KiB, selective {sel / 1024:.1f} KiB "
          f"(saves {(none - sel) / 1024:.1f} KiB, expected {want / 1024:.1f}); fused {fused / 1024:.1f} KiB, "
          f"selective {fsel / 1024:.1f} KiB")
    if none - sel != want:
        print("FAIL: selective recompute does not save one attention buffer per block but one")
        sys.exit(1)
    if fsel != fused:
        print("FAIL: with fused attention selective recompute keeps other bytes than none")
        sys.exit(1)
    if none - fused != 4 * (tt - lse) + tt - kv:
        print(f"FAIL: naive - fused = {none - fused} bytes, not 4 x ([T,T] - lse) + [T,T] - kv = {4 * (tt - lse) + tt - kv}")
        sys.exit(1)
EOF_PY
[ $rc -eq 0 ] || fail "the dry-run does not predict the run"
