#!/usr/bin/env bash
# Hugging Face Mixtral in and out (issue 28 item 7). A Mixtral written by a
# PyTorch mixture of experts implemented in the test (test/helpers/
# hf_mixtral.py: 4 experts, top 2, transformers' MixtralSparseMoeBlock and
# MixtralForCausalLM's names and config.json):
#  - model.init_from: the loaded weights' validation loss (step 0) equals
#    PyTorch's on the same samples (DTRUN_DUMP_VAL) within 1e-5 relative on
#    one process and under expert parallelism (dp 2 x ep 2), and the
#    folder's config makes the job a Llama with
#    model.moe (experts, top_k, d_ff_expert, the aux coefficient);
#  - dtrun generate: 32 greedy tokens equal PyTorch's (whole prefix each
#    step), routing each new token through the KV cache, on one process and
#    under tp 2;
#  - dtrun eval of the folder gives PyTorch's loss;
#  - dtrun export CKPT DIR/ of a fine-tuned Mixtral is a folder PyTorch's
#    Mixtral loads (strict names and shapes) whose loss is dtrun's own within
#    1e-5, and init_from of the export gives the checkpoint's parameters bit
#    for bit;
#  - refused in one line, exit 2: a sliding window shorter than the
#    positions, another architecture, a job whose model.moe says otherwise
#    than the folder (sigmoid router); and an export of an MoE Mixtral cannot
#    express (a shared expert), exit 6 (a checkpoint that cannot be exported).
# Needs Debian's torch (/usr/bin/python3); skips (77) without it.
source "$(dirname "$0")/../parallel/lib.bash"
PY=/usr/bin/python3
source "$ROOT/test/helpers/torch_serve.bash"
torch_serve_start MX "$ROOT/test/helpers/hf_mixtral.py" || exit 77  # MX ARGS: hf_mixtral.py ARGS, one PyTorch start-up for all
HF=$T/hf-mixtral
MX make "$HF" || fail "hf_mixtral.py make"

hf_job() { # NAME [HF_DIR]
  layout_job mixtral-hf "" "$T/$1.yaml" "$T/$1.jsonl"
  sed -i -e "s|@HF@|${2:-$HF}|" "$T/$1.yaml"
}
val0() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][0]["val_loss"])' "$1"; }
rel_ok() {
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); r=abs(a-b)/abs(b); print(f"rel {r:.2e}"); sys.exit(r>1e-5)' "$1" "$2" >"$T/rel" ||
    fail "$3: dtrun's loss $1 is not PyTorch's $2 ($(cat "$T/rel"))"
  echo "ok: $3: dtrun $1, PyTorch $2 ($(cat "$T/rel"))"
}

hf_job ref
DTRUN_DUMP_VAL=$T/ref.val "$DTRUN" worker "$T/ref.yaml" >"$T/ref.log" 2>&1 || { cat "$T/ref.log"; fail "one process from init_from"; }
"$DTRUN" --print-config "$T/ref.yaml" >"$T/ref.cfg" || fail "--print-config"
for want in "kind: llama" "experts: 4" "top_k: 2" "d_ff_expert: 48" "aux_loss_coef: 0.02"; do
  grep -q "^ *$want\$" "$T/ref.cfg" || { cat "$T/ref.cfg"; fail "the folder's config did not give '$want'"; }
done
echo "ok: config.json of model_type mixtral makes a llama with model.moe (4 experts, top 2, d_ff_expert 48, aux 0.02)"
rel_ok "$(val0 "$T/ref.jsonl")" "$(MX loss "$HF" "$T/ref.val")" "init_from a Mixtral: the loaded weights' loss"
# the same under expert parallelism (parallel.ep 2 over dp 2: each rank loads
# its 2 experts of every block from the folder's per-expert tensors)
layout_job mixtral-hf "dp=2 ep=2" "$T/ep.yaml" "$T/ep.jsonl"
sed -i -e "s|@HF@|$HF|" "$T/ep.yaml"
timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/ep.yaml" >"$T/ep.log" 2>&1 || { cat "$T/ep.log"; fail "ep 2 from init_from"; }
rel_ok "$(val0 "$T/ep.jsonl")" "$(MX loss "$HF" "$T/ref.val")" "init_from a Mixtral under dp 2 x ep 2: the loaded weights' loss"

torch_ids=$(MX greedy "$HF" --prompt-ids 1,2,3 --n 32 2>"$T/margin") || fail "pytorch greedy"
ids=$("$DTRUN" generate "$HF" --prompt-ids 1,2,3 --max-new-tokens 32 --temperature 0 --ids --no-echo 2>"$T/gen.err" | head -1)
[ "$ids" = "$torch_ids" ] || { echo "dtrun:   $ids"; echo "pytorch: $torch_ids"; cat "$T/gen.err"; fail "greedy tokens differ from PyTorch's"; }
echo "ok: 32 greedy tokens = PyTorch's ($(cat "$T/margin"))"
# under tp 2 (each expert's gate/up by rows, down by columns, the router
# replicated, one partial sum over tp): the same tokens through the KV cache
ids=$("$DTRUN" generate "$HF" --prompt-ids 1,2,3 --max-new-tokens 32 --temperature 0 --ids --no-echo --tp 2 2>"$T/gen.err" | head -1)
[ "$ids" = "$torch_ids" ] || { echo "dtrun tp 2: $ids"; echo "pytorch:    $torch_ids"; cat "$T/gen.err"; fail "greedy tokens under tp 2 differ from PyTorch's"; }
echo "ok: 32 greedy tokens under tp 2 = PyTorch's"

head -c 4000 "$ROOT/README.md" >"$T/text"
"$DTRUN" eval "$HF" --data "$T/text" --seq-len 32 >"$T/eval.out" 2>"$T/eval.err" || { cat "$T/eval.err"; fail "dtrun eval of the folder"; }
eval_loss=$(sed -n 's/.*loss \([0-9.]*\).*/\1/p' "$T/eval.out" | head -1)
rel_ok "$eval_loss" "$(MX loss-file "$HF" "$T/text" --seq-len 32)" "dtrun eval of the folder"

# export: fine-tuned 3 steps (routing, balance loss, experts all trained), out and back
hf_job rt
sed -i -e 's/^  steps: .*/  steps: 3/' "$T/rt.yaml"
printf 'checkpoint:\n  dir: %s\n' "$T/rt.ck" >>"$T/rt.yaml"
DTRUN_DUMP_PARAMS=$T/rt.bin "$DTRUN" worker "$T/rt.yaml" >"$T/rt.log" 2>&1 || { tail "$T/rt.log"; fail "fine-tuning run"; }
"$DTRUN" export "$T/rt.ck" "$T/rt-hf/" 2>"$T/rt.export.log" || { cat "$T/rt.export.log"; fail "export to a folder"; }
python3 - "$T/rt-hf/config.json" <<'PY' || fail "the export's config.json"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 48,
        "num_local_experts": 4, "num_experts_per_tok": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 256, "router_aux_loss_coef": 0.02, "sliding_window": None}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
assert not bad, bad
PY
DTRUN_DUMP_PARAMS=$T/rt-back.bin "$DTRUN" eval "$T/rt-hf" --data "$T/text" --seq-len 32 >"$T/rt-back.out" 2>"$T/rt-back.log" ||
  { cat "$T/rt-back.log"; fail "loading the export back"; }
cmp "$T/rt.bin" "$T/rt-back.bin" || fail "export then init_from is not bit-exact"
back_loss=$(sed -n 's/.*loss \([0-9.]*\).*/\1/p' "$T/rt-back.out" | head -1)
rel_ok "$back_loss" "$(MX loss-file "$T/rt-hf" "$T/text" --seq-len 32)" "dtrun export of a fine-tuned Mixtral in PyTorch's Mixtral (strict)"
echo "ok: init_from of the export gives the checkpoint's parameters bit for bit"

# refusals: one line, exit 2 (the job), exit 1 (an export)
refuse() { # NAME EXPECT EXTRA_CONFIG [JOB_LINE]
  local d=$T/hf-$1
  MX make "$d" --extra "$3" || fail "hf_mixtral.py make $1"
  hf_job "bad-$1" "$d"
  [ -n "${4:-}" ] && sed -i -e "s/^  seq_len: 32/&\n$4/" "$T/bad-$1.yaml"
  "$DTRUN" worker "$T/bad-$1.yaml" >/dev/null 2>"$T/err"; local rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "$2" "$T/err" ||
    { cat "$T/err"; fail "$1: exit $rc, want 2 and one line with '$2'"; }
  echo "ok: refused in one line: $(cat "$T/err")"
}
refuse window "sliding_window 16 is not supported" 'sliding_window=16'
refuse arch "is not MixtralForCausalLM" 'architectures=["Qwen2MoeForCausalLM"]'
refuse router "model.moe.router is not Mixtral's" 'sliding_window=null' '  moe: {router: sigmoid}'
sed -e 's/^  steps: .*/  steps: 1/' "$ROOT/test/parallel/llama-moe.yaml" >"$T/shared.yaml"
printf 'checkpoint:\n  dir: %s\n' "$T/shared.ck" >>"$T/shared.yaml"
"$DTRUN" worker "$T/shared.yaml" >"$T/shared.log" 2>&1 || { tail "$T/shared.log"; fail "a DeepSeek-style run"; }
"$DTRUN" export "$T/shared.ck" "$T/shared-hf/" >/dev/null 2>"$T/err"; rc=$?
[ $rc = 6 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "cannot export as Hugging Face Mixtral" "$T/err" ||
  { cat "$T/err"; fail "export of a sigmoid-routed MoE: exit $rc, want 6 and one line"; }
echo "ok: export refused in one line: $(cat "$T/err")"
torch_serve_stop
echo "ok: Hugging Face Mixtral in (init_from, generate, eval) and out (export), PyTorch's loss within 1e-5"
