#!/usr/bin/env bash
# bf16 mixed precision (train.precision: bf16), weights and gradients: bf16
# parameters and gradients in the units, the fp32 master and AdamW state in
# the optimizer. On the tiny GPT and ViT (synthetic data, 20 steps):
#
# 1. Layout independence in bf16 (DESIGN.md: "within a tolerance derived from
#    its rounding"): DDP, ZeRO-1, ZeRO-2 (with accumulation), FSDP over dp 2,
#    fp32 gradients reduced in bf16 (ZeRO-2; HSDP of one-rank nodes), a 2-stage
#    1F1B pipeline, tp 2 with and without sequence parallelism and dp 2 x tp 2
#    x pp 2 reproduce the one-process bf16 run: every step's loss within a
#    relative 1e-3, the final parameters within 1.6e-2. The GPT runs with
#    fused attention (gpt-bf16: AdamW eps 1e-5, see there) and with naive
#    attention (gpt-tiny, attn=naive).
#
#    Why these tolerances. The runs differ only in where gradient sums are
#    rounded to bf16 (u = 2^-9, round to nearest even): one process rounds the
#    fp32 sum of its 8 samples once, dp 2 rounds each rank's 4-sample sum and
#    then their sum (comm reduces bf16 in fp32 and rounds once), so a gradient
#    element differs by at most u|g| + 2u(|g0| + |g1|) ~ 3u|g| = 0.6 % (more
#    where the halves cancel). AdamW's update m/(sqrt(v) + eps) is invariant to
#    the gradient's scale, so this moves each master element by at most ~0.6 %
#    of lr = 3e-3 per step: 20 steps give |d master| <= 4e-4, and in practice
#    far less (the errors are not all of one sign). The parameters the model
#    computes from are bf16(master): masters that differ by much less than a
#    bf16 ulp round to the same bf16 or to neighbours, one ulp apart. Every
#    tiny-model weight is below 4 in magnitude (layernorm weights ~1, the rest
#    ~0.02), where an ulp is at most 2^-6 = 1.6e-2: that is the parameter
#    tolerance (measured: 2^-7, one ulp of a layernorm weight near 1). The
#    loss is first-order in the parameters: |dL| <= |grad L|_2 |d theta|_2,
#    where d theta is one ulp (2^-8 |theta_i|) on the fraction f of elements
#    whose masters straddle a rounding boundary, f ~ |d master| / ulp ~ 1 %:
#    |grad L| <= 1 (clipped at 1), |theta|_2 ~ 10, so |dL| <= 2^-8 * 10 *
#    sqrt(0.01) ~ 4e-3 absolute, 1e-3 of a loss ~ 3.5 (measured: <= 3.4e-4,
#    2026-11-26).
#    tp rounds where dp does: its collectives carry bf16 (runtime/parallel/
#    tp.h), so a row-parallel layer's partial sums and the activation
#    gradients it reduces or gathers are rounded per rank before the sum is
#    rounded once, u|x| + 2u(|p0| + |p1|) per element as above (a column
#    layer's gathered input is bf16 already: no rounding). pp adds none: a
#    stage boundary carries the bf16 stream the single process stashes at the
#    same block boundary. What differs in fp32 order only (~1e-7) moves a bf16
#    value where it straddles a rounding boundary, by one ulp, which the same
#    bound covers.
#    A real bug — a missed reduction, a stale shard, a wrong master — moves
#    the parameters by ~lr per step everywhere, the losses by > 1e-2.
#
# 2. DDP, ZeRO-1 and FSDP over dp 2 without accumulation round at the same
#    points (each rank's micro-batch gradient once, the reduced sum once), so
#    they are BITWISE the same run (losses and final parameters).
#
# 3. Memory by category, measured (account.h) against the fp32 run of the
#    same model: bf16 params are 2 bytes per parameter (half of fp32's 4),
#    bf16 gradients 2 (half), fp32 gradients 4 (equal), the fp32 master 4 per
#    parameter the rank updates (all of them in one process, half under ZeRO-1
#    dp 2), AdamW m and v 8 (as fp32); FSDP dp 2 halves params and grads too.
#    And the dry-run (runtime/parallel/sizes.c) predicts params + master,
#    grads and optimizer exactly.
source "$(dirname "$0")/../parallel/lib.bash"

LOSS_RTOL=1e-3
PARAM_ATOL=1.6e-2
LAYOUTS=(
  "dp=2 prec=bf16"
  "dp=2 mode=zero1 prec=bf16"
  "dp=2 mode=zero2 accum=2 prec=bf16"
  "dp=2 mode=fsdp prec=bf16"
  "dp=2 mode=zero2 prec=bf16 grad=fp32 reduce=bf16"
  "pp=2 sched=1f1b prec=bf16"
  "tp=2 prec=bf16"
  "dp=2 tp=2 pp=2 sched=1f1b prec=bf16"
)
# The GPT with fused attention (the default) as gpt-bf16: gpt-tiny with an
# AdamW eps above its key bias's bf16-sized noise (see there); and gpt-tiny
# itself with naive attention (attn=naive), whose noise the default eps
# tolerates.
for model in gpt-bf16 vit-tiny; do
  for lay in "${LAYOUTS[@]}"; do run_layout "$model" "$lay"; done
done
for lay in "${LAYOUTS[@]}"; do run_layout gpt-tiny "$lay attn=naive"; done
# sequence parallelism: the ViT's tokens (patches + class token) must split
# over tp, which vit-tiny's 5 do not (vit-sp has 10)
run_layout gpt-bf16 "tp=2 sp=1 prec=bf16"
run_layout gpt-tiny "tp=2 sp=1 prec=bf16 attn=naive"
run_layout vit-sp "tp=2 sp=1 prec=bf16"
# context parallelism (GPT, with an AdamW eps above the key bias's noise:
# gpt-bf16.yaml): the rows' log-sum-exp stays fp32 like the other
# statistics; the ring carries fp32 k and v (bf16 values) and their gradients
run_layout gpt-bf16 "cp=2 prec=bf16"
run_layout gpt-bf16 "cp=4 prec=bf16"
run_layout gpt-bf16 "cp=2 tp=2 sp=1 prec=bf16"
run_layout gpt-bf16 "cp=2 dp=2 mode=fsdp prec=bf16 grad=fp32"
run_layout gpt-bf16 "cp=2 pp=2 sched=1f1b recompute=selective prec=bf16"
# HSDP across two agents as two nodes of one rank each: shard groups of one,
# so DDP over the replicas, fp32 gradients through its bucket buffer in bf16
run_layout gpt-bf16 "dp=2 mode=hsdp nodes=2 prec=bf16 grad=fp32 reduce=bf16"
[ "$FAILS" -eq 0 ] || fail "$FAILS bf16 layouts differ from one process beyond the bf16 tolerance"
summary

# 2. the same rounding points, the same bits
for model in gpt-bf16 vit-tiny; do
  ddp=$T/$model-$(layout_name "dp=2 prec=bf16")
  for lay in "dp=2 mode=zero1 prec=bf16" "dp=2 mode=fsdp prec=bf16"; do
    d=$T/$model-$(layout_name "$lay")
    cmp -s "$ddp.bin" "$d.bin" || fail "$model [$lay]: final parameters differ from DDP's bits"
    python3 - "$ddp.jsonl" "$d.jsonl" <<'PY' || fail "$model [$lay]: losses differ from DDP's bits"
import json, sys
a, b = ([json.loads(l).get("loss") for l in open(f) if l.strip()] for f in sys.argv[1:])
sys.exit(0 if a == b else 1)
PY
    echo "ok   $model [$lay]: bitwise DDP's run"
  done
done

# 3. memory by category
mem_job() { # NAME LAYOUT
  layout_job gpt-tiny "$2" "$T/m-$1.yaml" "$T/m-$1.jsonl"
  sed -i -e 's/^  steps: .*/  steps: 2/' "$T/m-$1.yaml"
  local n=$(($(lget "$2" dp 1) * $(lget "$2" tp 1) * $(lget "$2" pp 1)))
  timeout -k 5 120 "$DTRUN" --nproc-per-node=$n "$T/m-$1.yaml" >"$T/m-$1.log" 2>&1 ||
    { tail -n 20 "$T/m-$1.log"; fail "$2 did not train"; }
  "$DTRUN" --dry-run --hardware cpu --format=json "$T/m-$1.yaml" >"$T/m-$1.dry.json" 2>"$T/m-$1.dry.err" ||
    { cat "$T/m-$1.dry.err"; fail "$2: dry-run failed"; }
}
mem_job fp32 "pp=1"
mem_job bf16 "pp=1 prec=bf16"
mem_job bf16g32 "pp=1 prec=bf16 grad=fp32"
mem_job zero1 "dp=2 mode=zero1 prec=bf16"
mem_job fsdp "dp=2 mode=fsdp prec=bf16"
mem_job tpsp "tp=2 sp=1 prec=bf16"
mem_job tpsp32 "tp=2 sp=1"
mem_job tp "tp=2 prec=bf16"
mem_job tp32 "tp=2"
python3 - "$T" <<'PY' || fail "bf16 memory by category is not 2 / grad / 4 + 8 bytes per parameter"
import json, sys
T = sys.argv[1]
def peak(name, r=0):
    return [json.loads(l) for l in open(f"{T}/m-{name}.rank{r}.jsonl") if l.strip()][-1]["mem_peak"]
f32 = peak("fp32")
n = f32["params"] // 4  # parameters one process holds (fp32: 4 bytes each)
ok = True
def check(what, cond):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= bool(cond)
check(f"fp32: {n} parameters, no master (master {f32['master']})", f32["master"] == 0)
near = lambda a, b: abs(a - b) <= 64  # a dp shard of each unit: comm_chunk's ceil split
for name, pb, gb, mb, ob in (("bf16", 2, 2, 4, 8), ("bf16g32", 2, 4, 4, 8)):
    m = peak(name)
    check(f"{name}: params {m['params']} = 2 x {n}, grads {m['grads']} = {gb} x {n}, master {m['master']} = 4 x {n}, "
          f"optimizer {m['optimizer']} = 8 x {n}",
          m["params"] == pb * n and m["grads"] == gb * n and m["master"] == mb * n and m["optimizer"] == ob * n)
for r in (0, 1):
    m = peak("zero1", r)
    check(f"zero1 dp 2 rank {r}: params {m['params']} = 2 x {n}, grads {m['grads']} = 2 x {n}, "
          f"master {m['master']} ~ 4 x {n} / 2, optimizer {m['optimizer']} ~ 8 x {n} / 2",
          m["params"] == 2 * n and m["grads"] == 2 * n and near(m["master"], 2 * n) and near(m["optimizer"], 4 * n))
    m = peak("fsdp", r)
    check(f"fsdp dp 2 rank {r}: params {m['params']} ~ 2 x {n} / 2, grads {m['grads']} ~ 2 x {n} / 2, "
          f"master {m['master']} ~ 4 x {n} / 2",
          near(m["params"], n) and near(m["grads"], n) and near(m["master"], 2 * n) and near(m["optimizer"], 4 * n))
for name in ("bf16", "bf16g32", "zero1", "fsdp"):
    dry = json.load(open(f"{T}/m-{name}.dry.json"))["stages"][0]["memory"]
    m = peak(name)
    check(f"{name}: dry-run params + master {dry['params']} + {dry['master']}, grads {dry['grads']}, "
          f"optimizer {dry['optimizer']} = measured {m['params']} + {m['master']}, {m['grads']}, {m['optimizer']}",
          dry["params"] == m["params"] and dry["master"] == m["master"] and dry["grads"] == m["grads"]
          and dry["optimizer"] == m["optimizer"])
# tp 2 with sequence parallelism: every category, the tp collectives' bf16
# staging (comm) included, as the dry-run says, on both tp ranks
for r in (0, 1):
    m = peak("tpsp", r)
    dry = json.load(open(f"{T}/m-tpsp.dry.json"))["stages"][0]["memory"]
    d = {"params": dry["params"], "master": dry["master"], "grads": dry["grads"], "optimizer": dry["optimizer"],
         "buffers": dry["comm"], "activations": dry["activations"] + dry["logits"] + dry["workspace"]}
    same = all(d[k] == m[k] for k in d) and dry["allocated"] == m["total"]
    check(f"tp 2 + sp rank {r}: dry-run {d} (allocated {dry['allocated']}) = measured "
          f"{ {k: m[k] for k in d} } (total {m['total']})", same and dry["comm"] > 0)
# the tp collectives carry bf16: about half of fp32's bytes (the head's
# statistics and the layernorm gradients stay fp32; both runs take 2 steps)
for b16, b32 in (("tpsp", "tpsp32"), ("tp", "tp32")):
    s16 = [json.loads(l) for l in open(f"{T}/m-{b16}.rank0.jsonl") if l.strip()][-1]["bytes_sent"]["tp"]
    s32 = [json.loads(l) for l in open(f"{T}/m-{b32}.rank0.jsonl") if l.strip()][-1]["bytes_sent"]["tp"]
    check(f"{b16}: tp bytes sent in bf16 {s16} vs fp32 {s32}: {s16 / s32:.3f} (0.5 to 0.55)", 0.5 <= s16 / s32 <= 0.55)
sys.exit(0 if ok else 1)
PY
echo "PASS parallel_bf16"
