#!/usr/bin/env bash
# model.attention (issue 14): the fused attention (the blockwise ops with the
# online softmax, each row's log-sum-exp kept) against the naive one (the
# softmax probabilities materialised and kept), through bin/dtrun.
#
# 1. The same training run. The tiny GPT (causal) and the tiny ViT (not
#    causal), 20 steps, one process: fused against naive, every step's loss
#    within 1e-5 relative and the final parameters within 1e-4, the layout
#    tolerances of parallel_equivalence.sh, for the same reason: the two only
#    sum the softmax in another order (the online softmax's running max and
#    rescaling; backward recomputes the probabilities from q, k and the lse),
#    so losses agree to ~1e-7 and the parameters to Adam's amplification of
#    that noise on gradients that are truly zero (the key bias). In bf16 naive
#    rounds its probabilities to bf16 where it keeps them and fused has none to
#    round: the two then differ by that rounding, within the bf16 layout
#    tolerances of parallel_bf16.sh (loss 1e-3 relative, parameters 1.6e-2, one
#    bf16 ulp at 4). The GPT runs as gpt-bf16 (gpt-tiny with AdamW eps 1e-5,
#    see there): its key bias has no true gradient, only rounding noise, which
#    the default eps turns into +-lr steps whose sign follows the noise, and
#    the two attentions round differently.
# 2. Memory. A GPT of 128 tokens (4 blocks, 4 heads, d 64, micro-batch 2),
#    tp 1 and tp 2, fused and naive: on every rank the measured activations
#    equal the dry-run's to the byte, and naive - fused is exactly what the
#    T x T terms say: 4 blocks x ([mb, heads/tp, T, T] - [mb, heads/tp, T]
#    lse) + the [mb, heads/tp, T, T] backward scratch - fused's [mb T, 4 d/tp]
#    k, v and gradient scratch (fp32, every size a whole number of cache
#    lines).
source "$(dirname "$0")/../parallel/lib.bash"
source "$(dirname "$0")/../parallel/pvm.bash"

same_run() { # MODEL WORDS LOSS_RTOL PARAM_ATOL
  local model=$1 words=$2 f n out
  reference "$model" 2 "$words"
  reference "$model" 2 "$words${words:+ }attn=naive"
  f=$T/ref-$model-2; [ -n "$words" ] && f=$f-$(layout_name "$words")
  n=$T/ref-$model-2-$(layout_name "$words${words:+ }attn=naive")
  out=$(python3 "$ROOT/test/parallel/compare.py" "$f.jsonl" "$f.bin" "$n.jsonl" "$n.bin" "$3" "$4" 2>&1) ||
    { echo "$out" | sed 's/^/    /'; fail "$model ${words:-fp32}: fused and naive attention train differently"; }
  echo "ok   $model ${words:-fp32}: fused = naive attention: ${out##*$'\n'} (limits $3, $4)"
}
same_run gpt-tiny "" 1e-5 1e-4
same_run vit-tiny "" 1e-5 1e-4
same_run gpt-bf16 "prec=bf16" 1e-3 1.6e-2
same_run vit-tiny "prec=bf16" 1e-3 1.6e-2

BUSY=1 # memory only: no bubble is judged here
for tp in 1 2; do
  measure "fused-tp$tp" "tp=$tp seq=128"
  measure "naive-tp$tp" "tp=$tp seq=128 attn=naive"
done
python3 - "$T" <<'EOF_PY' || fail "activation memory of fused and naive attention is not what the dry-run says"
import glob, json, sys
d = sys.argv[1]
ok = True
def rank_acts(name):
    out = {}
    for f in glob.glob(f"{d}/{name}.rank*.jsonl"):
        rows = [json.loads(l) for l in open(f) if l.strip()]
        out[rows[-1]["rank"]] = rows[-1]["mem_peak"]
    return out
for tp in (1, 2):
    acts = {}
    for kind in ("fused", "naive"):
        name = f"{kind}-tp{tp}"
        dry = json.load(open(f"{d}/{name}.dry.json"))
        for r, peak in sorted(rank_acts(name).items()):
            m = dry["stages"][0]["memory_by_tp_rank"][r]
            pred = m["activations"] + m["logits"] + m["workspace"]
            good = peak["activations"] == pred and peak["total"] == m["allocated"]
            ok &= good
            print(f"{'ok  ' if good else 'FAIL'} {name} rank {r}: activations {peak['activations']} bytes, dry-run "
                  f"{pred}; total {peak['total']}, dry-run {m['allocated']}")
            acts[kind, r] = peak["activations"]
    mb, heads, T, dm, L = 2, 4 // tp, 128, 64 // tp, 4
    tt, lse, kv = mb * heads * T * T * 4, mb * heads * T * 4, mb * T * 4 * dm * 4
    want = L * (tt - lse) + tt - kv
    for r in range(tp):
        got = acts["naive", r] - acts["fused", r]
        good = got == want
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} tp {tp} rank {r}: naive {acts['naive', r] / 1024:.0f} KiB, fused "
              f"{acts['fused', r] / 1024:.0f} KiB of activations: {got} bytes fewer, want {L} x ([T, T] {tt} - lse {lse})"
              f" + scratch [T, T] {tt} - kv {kv} = {want}")
sys.exit(0 if ok else 1)
EOF_PY
echo "fused attention: the same training run as naive (GPT causal, ViT, fp32 and bf16); activations as the dry-run says"
