#!/usr/bin/env bash
# model.moe end to end (issue 28 items 1, 2, 5): tiny GPT and Llama mixtures
# of experts trained by the real binary.
#  - one process: the loss falls; every step record of the metrics JSONL
#    carries aux_loss and, per MoE block, its tokens per expert (summing to
#    the step's tokens x top_k), imbalance (max / mean) and dropped choices
#    (0 dropless, > 0 with the Llama's capacity); the progress line shows the
#    worst block's imbalance; TensorBoard has train/aux_loss and moe/*;
#  - exact resume: 40 steps in one go and 20 + resume + 20 give bitwise the
#    same parameters and losses, for the GPT (softmax, dropless) on one
#    process and dp 2, and the Llama (sigmoid, a shared expert, a capacity,
#    DeepSeek-V3's routing bias, which the checkpoint carries) on one process;
#  - layouts: dp 2 (DDP, ZeRO-1, FSDP) and pp 2 reproduce the one-process
#    run within the layout tolerance (lib.bash), and the Llama resumes under
#    pp 2 from a dp 2 checkpoint;
#  - refused in one line, exit 2: model.moe with a ViT, top_k above experts
#    (tp: ep.sh's layouts).
source "$(dirname "$0")/../parallel/ckpt.bash"

# one process, with the metrics, the progress line and TensorBoard
for model in gpt-moe llama-moe; do
  layout_job "$model" "" "$T/$model.yaml" "$T/$model.jsonl"
  sed -i -e "s|^  progress: off|  progress: on\n  tensorboard: $T/$model.tb|" "$T/$model.yaml"
  timeout -k 5 120 "$DTRUN" --nproc-per-node=1 "$T/$model.yaml" >"$T/$model.out" 2>"$T/$model.err" ||
    { cat "$T/$model.err"; fail "$model: one process"; }
  grep -q 'moe imb [0-9.]*' "$T/$model.out" || { cat "$T/$model.out"; fail "$model: no imbalance on the progress line"; }
  python3 - "$T/$model.jsonl" "$model" <<'PY' || fail "$model: the metrics"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
llama = sys.argv[2] == "llama-moe"
tokens = 8 * (16 if llama else 32) * 2          # global batch x seq_len x top_k
blocks = [1] if llama else [0, 1]                # the Llama's first block is dense
assert len(steps) == 20 and steps[-1]["loss"] < steps[0]["loss"], "the loss did not fall"
for s in steps:
    assert s["aux_loss"] > 0, s
    assert [b["layer"] for b in s["moe"]] == blocks, s["moe"]
    for b in s["moe"]:
        assert len(b["tokens"]) == 4 and sum(b["tokens"]) == tokens, b
        assert abs(b["imbalance"] - max(b["tokens"]) / (tokens / 4)) < 1e-5, b
        assert (b["dropped"] > 0) if llama else (b["dropped"] == 0), b
drops = sum(b["dropped"] for s in steps for b in s["moe"])
print(f"ok: {sys.argv[2]}: 20 steps, loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}, aux_loss "
      f"{steps[-1]['aux_loss']:.3f}, imbalance {max(b['imbalance'] for b in steps[-1]['moe']):.2f}, {drops:.0f} dropped")
PY
  ev=$(ls "$T/$model.tb"/events.out.tfevents.* 2>/dev/null | head -1)
  [ -n "$ev" ] && grep -aq 'train/aux_loss' "$ev" && grep -aq 'moe/imbalance' "$ev" ||
    fail "$model: TensorBoard has no train/aux_loss or moe/imbalance"
  echo "ok: $model: the progress line shows the imbalance ($(grep -ao 'moe imb [0-9.]*[^|]*' "$T/$model.out" | tail -1)), TensorBoard has the MoE scalars"
done

# dtrun plot: a fourth panel with the worst imbalance and the balance loss per block
"$DTRUN" plot "$T/gpt-moe.jsonl" "$T/llama-moe.jsonl" -o "$T/moe.svg" 2>"$T/plot.err" || { cat "$T/plot.err"; fail "dtrun plot"; }
grep -q 'id="panel-moe"' "$T/moe.svg" && [ "$(grep -c 'class="moe-imbalance"' "$T/moe.svg")" -ge 2 ] &&
  [ "$(grep -c 'class="moe-aux"' "$T/moe.svg")" -ge 2 ] || fail "dtrun plot has no MoE panel with both runs' lines"
"$DTRUN" plot "$T/gpt-moe.jsonl" -o "$T/one.svg" 2>/dev/null && grep -q 'id="panel-moe"' "$T/one.svg" || fail "plot of one MoE run"
echo "ok: dtrun plot draws the MoE panel (worst imbalance, balance loss per block) for both runs"

ckpt_exact gpt-moe ""
ckpt_exact gpt-moe "dp=2"
ckpt_exact llama-moe ""

for lay in "dp=2" "dp=2 mode=zero1" "dp=2 mode=fsdp" "pp=2 sched=1f1b"; do
  run_layout gpt-moe "$lay" || fail "gpt-moe [$lay]"
  run_layout llama-moe "$lay" || fail "llama-moe [$lay]"
done
reshard llama-moe "dp=2" "pp=2 sched=1f1b"

# refused before anything starts
bad() { # NAME EXPECT YAML
  printf '%s\n' "$3" >"$T/bad-$1.yaml"
  "$DTRUN" --dry-run "$T/bad-$1.yaml" >/dev/null 2>"$T/err"; local rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "$2" "$T/err" ||
    { cat "$T/err"; fail "$1: exit $rc, want 2 and one line with '$2'"; }
  echo "ok: $1 refused in one line: $(cat "$T/err")"
}
bad vit "applies to gpt and llama models only" $'model:\n  preset: vit-tiny\n  moe: {experts: 4}'
bad top-k "top_k 5 is more than model.moe.experts 4" $'model:\n  preset: llama-tiny\n  moe: {experts: 4, top_k: 5}'
echo "ok: model.moe: one process, exact resume (3), layouts (8) and a reshard, refusals (2)"
