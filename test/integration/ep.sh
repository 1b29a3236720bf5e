#!/usr/bin/env bash
# parallel.ep end to end (issue 28 items 3 and 4): the routed experts split
# over ep ranks folded into dp x cp, tokens moved by all-to-all(v), trained by
# the real binary on three tiny mixtures of experts:
#   gpt-moe       softmax, top-2, dropless
#   gpt-moe-top1  softmax, top-1 (Switch), a shared expert, capacity 1.0
#   llama-moe     sigmoid (DeepSeek-V3), top-2, a shared expert, the routing
#                 bias update, capacity 0.5 (half the choices drop)
#  - every layout reproduces the one-process run within the layout tolerance
#    (lib.bash: losses 1e-5 relative, parameters 1e-4; bf16: parallel_bf16.sh's
#    1e-3 and 1.6e-2): ep 2 and ep 4 over dp (DDP, ZeRO-1, ZeRO-2, FSDP), ep
#    with pp 2 (1F1B), with cp 2, with block recompute, in bf16; tp 2 with and
#    without sequence parallelism (each expert and the shared experts split
#    over tp as the dense MLP, the router replicated), ep 2 x tp 2, with pp 2,
#    with cp 2, FSDP, block recompute, and in bf16 (gpt-moe-bf16: gpt-moe with
#    gpt-bf16's AdamW eps, for the key bias's rounding noise);
#  - the routing is the same: every step's tokens per expert, dropped choices
#    (the capacity is per sample, job_moe_capacity, so the same tokens drop
#    under every layout) and balance loss equal the one-process run's;
#  - checkpoints reshard across a change of ep and tp: 20 steps at ep 2 then
#    20 at ep 4, ep 4 (FSDP) then one process, ep 2 x tp 2 (SP) then one
#    process, tp 2 then ep 4, stay on the one-process curve;
#  - memory: ep_memory.sh (the dry-run against what ep runs hold, with
#    expert buffers sized by what arrives);
#  - refused in one line, exit 2, before any worker starts: ep not dividing
#    the experts, ep not dividing dp x cp, ep without model.moe, d_ff_expert
#    not divisible by tp.
# DTRUN_TEST_FULL=1 adds a longer matrix (interleaved pipelines, ZeRO-2 with
# accumulation, selective recompute, bf16 FSDP, dp 2 x cp 2 x ep 4 ...).
source "$(dirname "$0")/../parallel/ckpt.bash"

# same_routing MODEL LAYOUT: the run's MoE records equal the reference's.
same_routing() {
  local model=$1 lay=$2 L pw
  L=$(layout_layers "$lay"); pw=$(ref_words "$lay")
  local ref=$T/ref-$model-$L; [ -n "$pw" ] && ref=$ref-$(layout_name "$pw")
  python3 - "$ref.jsonl" "$T/$model-$(layout_name "$lay").jsonl" "$model [$lay]" <<'PY' || fail "$model [$lay]: routing"
import json, sys
def read(p):
    return [json.loads(l) for l in open(p) if '"loss"' in l and '"moe"' in l]
a, b = read(sys.argv[1]), read(sys.argv[2])
assert len(a) == len(b) == 20, (len(a), len(b))
drops = 0
for x, y in zip(a, b):
    for p, q in zip(x["moe"], y["moe"]):
        assert p["layer"] == q["layer"] and p["tokens"] == q["tokens"] and p["dropped"] == q["dropped"], \
            f"step {x['step']}: {p} vs {q}"
        drops += p["dropped"]
    assert abs(x["aux_loss"] - y["aux_loss"]) <= 1e-5 * abs(x["aux_loss"]), (x["aux_loss"], y["aux_loss"])
print(f"ok   routing {sys.argv[3]}: tokens per expert, {drops:.0f} dropped choices and the balance loss "
      f"as one process, every step")
PY
}

GPT=("dp=2 ep=2" "dp=4 ep=4 mode=zero1" "dp=4 ep=2 mode=fsdp" "dp=2 ep=2 pp=2 sched=1f1b" "cp=2 ep=2"
     "tp=2" "dp=2 tp=2 ep=2" "dp=2 tp=2 ep=2 pp=2 sched=1f1b" "cp=2 tp=2 ep=2 sp=1" "dp=4 ep=2 mode=hsdp nodes=2")
TOP1=("dp=2 ep=2" "dp=4 ep=4 mode=zero2" "tp=2 sp=1")
LLAMA=("dp=2 ep=2" "dp=4 ep=4" "cp=2 ep=2 mode=fsdp" "dp=2 ep=2 pp=2 sched=1f1b recompute=block"
       "tp=2 sp=1" "dp=2 tp=2 ep=2 sp=1 mode=fsdp recompute=block" "dp=4 ep=2 tp=2 sp=1 mode=hsdp nodes=2")
BF16=("dp=2 ep=2 prec=bf16" "dp=2 tp=2 ep=2 prec=bf16" "dp=2 tp=2 ep=2 sp=1 prec=bf16")
if [ "${DTRUN_TEST_FULL:-0}" = 1 ]; then
  GPT+=("dp=4 ep=2 mode=zero2 accum=2" "dp=2 ep=2 pp=2 sched=interleaved" "dp=2 cp=2 ep=4 mode=fsdp"
        "dp=2 ep=2 recompute=selective attn=naive" "dp=4 ep=4 pp=2 sched=gpipe")
  TOP1+=("dp=2 ep=2 mode=fsdp" "cp=2 ep=2 pp=2 sched=1f1b" "dp=4 ep=2 recompute=block")
  LLAMA+=("dp=4 ep=2 mode=zero1" "dp=2 cp=2 ep=4" "dp=4 ep=4 mode=zero2 accum=2" "dp=2 ep=2 pp=2 sched=interleaved")
  BF16+=("dp=2 ep=2 prec=bf16 mode=fsdp" "dp=2 ep=2 prec=bf16 grad=fp32 mode=zero1")
fi

for lay in "${GPT[@]}"; do run_layout gpt-moe "$lay" || fail "gpt-moe [$lay]"; same_routing gpt-moe "$lay"; done
for lay in "${TOP1[@]}"; do run_layout gpt-moe-top1 "$lay" || fail "gpt-moe-top1 [$lay]"; same_routing gpt-moe-top1 "$lay"; done
for lay in "${LLAMA[@]}"; do run_layout llama-moe "$lay" || fail "llama-moe [$lay]"; same_routing llama-moe "$lay"; done
# bf16: parallel_bf16.sh's tolerance (a rounding apart may also move a token
# to another expert, so the routing is not compared)
for lay in "${BF16[@]}"; do
  LOSS_RTOL=1e-3 PARAM_ATOL=1.6e-2 run_layout gpt-moe-bf16 "$lay" || fail "gpt-moe-bf16 [$lay]"
done

# checkpoints across a change of ep, and back to one process
reshard llama-moe "dp=2 ep=2" "dp=4 ep=4"
reshard gpt-moe "dp=4 ep=4 mode=fsdp" "pp=1"
reshard llama-moe "dp=2 tp=2 ep=2 sp=1" "pp=1"
reshard gpt-moe "tp=2" "dp=4 ep=4"

# refused before anything starts (the launcher checks the job: no worker runs)
bad() { # NAME EXPECT NPROC YAML
  printf '%s\n' "$4" >"$T/bad-$1.yaml"
  timeout -k 5 60 "$DTRUN" --nproc-per-node="$3" "$T/bad-$1.yaml" >"$T/out" 2>"$T/err"; local rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "$2" "$T/err" && [ ! -s "$T/out" ] ||
    { cat "$T/out" "$T/err"; fail "$1: exit $rc, want 2 and one line with '$2'"; }
  echo "ok: $1 refused in one line: $(cat "$T/err")"
}
bad ep-experts "parallel.ep 4 does not divide model.moe.experts 6" 4 \
  $'model:\n  preset: gpt-tiny\n  moe: {experts: 6}\ntrain: {global_batch: 8, micro_batch: 2}\nparallel:\n  dp: 4\n  ep: 4'
bad ep-dp "parallel.ep 4 does not divide dp 2 x cp 1 = 2" 2 \
  $'model:\n  preset: gpt-tiny\n  moe: {experts: 8}\ntrain: {global_batch: 8, micro_batch: 4}\nparallel:\n  dp: 2\n  ep: 4'
bad ep-no-moe "parallel.ep 2 needs model.moe" 2 \
  $'model:\n  preset: gpt-tiny\ntrain: {global_batch: 8, micro_batch: 4}\nparallel:\n  dp: 2\n  ep: 2'
bad moe-tp-dff "model.moe.d_ff_expert 33 is not divisible by parallel.tp 2" 2 \
  $'model:\n  preset: gpt-tiny\n  moe: {experts: 4, d_ff_expert: 33}\ntrain: {global_batch: 8, micro_batch: 8}\nparallel:\n  tp: 2'
summary
echo "ok: parallel.ep: ${#GPT[@]} + ${#TOP1[@]} + ${#LLAMA[@]} layouts with the one-process routing, ${#BF16[@]} in bf16, 4 reshards across ep and tp, 4 refusals"
