#!/usr/bin/env bash
# Context parallelism (parallel.cp, ring mode; issue 17): the tiny GPT (fp32,
# synthetic data, 20 steps, causal, 16 tokens a sample) with each sample's
# sequence split over cp ranks — the load-balanced chunk pairs (cp 2: chunks
# {0,3} and {1,2} of 4 tokens; cp 4: {0,7} {1,6} {2,5} {3,4} of 2) — must
# reproduce the single-process run within the tolerances of every other
# layout (parallel_equivalence.sh: loss relative 1e-5, parameters 1e-4):
# the ring only changes the order of the softmax's sums (the online softmax
# merges the blocks' partial results exactly, up to fp32 rounding), and the
# gradient reduction over dp x cp only the order of the gradients' sums.
#
# Combinations: with data parallelism (DDP, ZeRO-1, ZeRO-2, FSDP sharded over
# dp x cp), tensor parallelism (alone, with sequence parallelism), a 1F1B
# pipeline, gradient accumulation and both recomputes (block: the ring runs
# again in backward; selective: nothing to recompute, the ring keeps no
# probabilities).
#
# Bad layouts: a seq_len that 2 x cp does not divide, a ViT, and a world
# that is not dp x cp x pp x tp are each refused in one line, exit status 2.
source "$(dirname "$0")/../parallel/lib.bash"

LAYOUTS=(
  "cp=2"
  "cp=4"
  "dp=2 cp=2 mode=fsdp"
  "cp=2 tp=2"
  "cp=2 tp=2 sp=1"
  "pp=2 sched=1f1b cp=2"
  "dp=2 cp=2"
  "dp=2 cp=2 mode=zero1"
  "dp=2 cp=2 mode=zero2"
  "cp=2 accum=2"
  "cp=2 recompute=block"
  "cp=2 recompute=selective"
  "cp=4 tp=2"
  "dp=2 cp=2 mode=hsdp nodes=2"
  "dp=4 cp=2 mode=hsdp nodes=2"
)
for lay in "${LAYOUTS[@]}"; do run_layout gpt-tiny "$lay"; done
summary
[ $FAILS -eq 0 ] || fail "$FAILS context-parallel layouts differ from one process"

# HSDP over dp x cp: a node's dp x cp ranks shard, the nodes replicate; every
# rank's memory is what the dry-run of the same two nodes says
for lay in "dp=2 cp=2 mode=hsdp nodes=2" "dp=4 cp=2 mode=hsdp nodes=2"; do
  d=$T/gpt-tiny-$(layout_name "$lay")
  per=$(( $(lget "$lay" dp 1) * $(lget "$lay" cp 1) / 2 ))
  "$DTRUN" --dry-run --hardware cpu --nnodes 2 --nproc-per-node "$per" --format=json "$d.yaml" >"$d.dry.json" 2>&1 ||
    { cat "$d.dry.json"; fail "[$lay]: dry-run failed"; }
  python3 - "$d" "$lay" <<'PY' || fail "[$lay]: memory is not what the dry-run says"
import glob, json, sys
d, lay = sys.argv[1:3]
dry = json.load(open(f"{d}.dry.json"))
want = dry["stages"][0]["memory_by_tp_rank"][0]["allocated"]
ok = True
for f in sorted(glob.glob(f"{d}.rank*.jsonl")):
    got = [json.loads(l) for l in open(f) if l.strip()][-1]["mem_peak"]["total"]
    ok &= got == want
    print(("ok  " if got == want else "FAIL") + f" [{lay}] {f.split('.')[-2]}: {got} bytes, dry-run {want}")
groups = {c["group"]: c["size"] for c in dry["stages"][0]["comm"]}
print(f"     dry-run groups: {groups}")
sys.exit(0 if ok else 1)
PY
done

# ---- bad layouts: one line, exit 2 ----
refuse() { # NAME EXPECTED-REGEX YAML-EDIT NPROC
  local name=$1 want=$2 edit=$3 nproc=$4 y=$T/bad-$1.yaml out rc
  layout_job gpt-tiny "cp=2" "$y" "$T/bad-$name.jsonl"
  sed -i -e "$edit" "$y"
  out=$(timeout -k 5 60 "$DTRUN" --nproc-per-node="$nproc" "$y" 2>&1); rc=$?
  [ $rc -eq 2 ] || fail "$name: exit $rc, expected 2: $out"
  echo "$out" | grep -Eq "$want" || fail "$name: expected /$want/, got: $out"
  [ "$(echo "$out" | grep -c .)" -eq 1 ] || fail "$name: more than one line: $out"
  echo "ok   refused $name: $out"
}
refuse seq "2 x cp = 4 equal chunks" 's/^  seq_len: .*/  seq_len: 18/' 2
refuse vit "parallel.cp 2 needs model.kind gpt or llama" 's/^  kind: gpt/  kind: vit\n  image_size: 8\n  patch_size: 4\n  channels: 1\n  n_classes: 4/; /vocab_size\|seq_len/d' 2
refuse world "x cp 2 = 2 workers, but 4" 's/^  cp: .*/  cp: 2/' 4
# ---- the planner searches cp and picks it where it is best by its own estimate ----
# A 7B GPT (32 blocks, d_model 4096, 32 heads) at 32k tokens in fp32 on one node
# of 8 H100s, with naive attention: without cp every layout keeps [seq, seq]
# attention probabilities (32 heads x 32k^2 x 4 B = 137 GB a block, over tp);
# with cp none (the ring is blockwise whatever model.attention says).
cat >"$T/gpt7b-32k.yaml" <<'YAML'
model: {kind: gpt, n_layer: 32, n_head: 32, d_model: 4096, vocab_size: 50304, seq_len: 32768, attention: naive}
data: {kind: synthetic}
train: {steps: 10, global_batch: 8, lr: 3.0e-4, precision: fp32}
YAML
"$DTRUN" --dry-run --plan --format=json --hardware "$ROOT/configs/hardware/h100-sxm.yaml" --nproc-per-node 8 \
  "$T/gpt7b-32k.yaml" >"$T/plan.json" 2>"$T/plan.err" || { cat "$T/plan.err"; fail "--plan failed"; }
python3 - "$T/plan.json" <<'PY' || fail "--plan does not pick cp for the 7B GPT at 32k"
import json, sys
p = json.load(open(sys.argv[1]))
top = p["top"][0]
print(f"plan: searched {p['searched']}, best dp {top['dp']} x cp {top['cp']} x tp {top['tp']} x pp {top['pp']} "
      f"mode {top['mode']} recompute {top['recompute']}: step {top['step_s']:.1f} s" if "step_s" in top else
      f"plan: searched {p['searched']}, best {top}")
sys.exit(0 if top["cp"] > 1 and all(t["cp"] > 1 for t in p["top"]) else 1)
PY
# fused attention (the default) keeps no [seq, seq] either way: layouts
# without cp fit at 32k too and stand among the ten best
sed -e 's/, attention: naive}/}/' "$T/gpt7b-32k.yaml" >"$T/gpt7b-32k-fused.yaml"
"$DTRUN" --dry-run --plan --format=json --hardware "$ROOT/configs/hardware/h100-sxm.yaml" --nproc-per-node 8 \
  "$T/gpt7b-32k-fused.yaml" >"$T/plan-fused.json" 2>"$T/plan.err" || { cat "$T/plan.err"; fail "--plan (fused) failed"; }
python3 - "$T/plan-fused.json" <<'PY' || fail "--plan finds no layout without cp for the fused 7B GPT at 32k"
import json, sys
top = json.load(open(sys.argv[1]))["top"]
nocp = [t for t in top if t["cp"] == 1]
print(f"plan, fused attention: best cp {top[0]['cp']} at {top[0]['step_s']:.1f} s; best without cp: "
      + (f"dp {nocp[0]['dp']} x tp {nocp[0]['tp']} at {nocp[0]['step_s']:.1f} s" if nocp else "none in the top 10"))
sys.exit(0 if nocp else 1)
PY
# a short sequence gains nothing from the ring: the planner does not pick cp there
sed -e 's/seq_len: 32768/seq_len: 1024/' "$T/gpt7b-32k-fused.yaml" >"$T/gpt7b-1k.yaml"
"$DTRUN" --dry-run --plan --format=json --hardware "$ROOT/configs/hardware/h100-sxm.yaml" --nproc-per-node 8 \
  "$T/gpt7b-1k.yaml" >"$T/plan1k.json" 2>"$T/plan.err" || { cat "$T/plan.err"; fail "--plan (1k) failed"; }
python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["top"][0]; print("plan at 1k tokens: best cp", t["cp"]); sys.exit(t["cp"] != 1)' \
  "$T/plan1k.json" || fail "--plan picks cp for a 1k-token sequence"
echo "context parallelism: all layouts equal to one process, bad layouts refused, planned where it pays"
