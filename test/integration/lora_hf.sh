#!/usr/bin/env bash
# train.lora with Hugging Face and PEFT on both sides (issue 29 item 3). The
# Llama of test/helpers/hf_llama.py (random weights, GQA) is the frozen base
# (model.init_from); test/helpers/peft_lora.py is PEFT's LoRA written in
# PyTorch (no peft package), with PEFT's folder format:
#  - train.lora.init_from of a PEFT adapter made in PyTorch (every target,
#    B nonzero): the adapter and the job's rank, alpha and targets come from
#    its adapter_config.json; dtrun's step-0 validation loss under tp 2 (A and
#    B split as their base layers) equals PyTorch's PEFT model's on the same
#    samples within 1e-5 relative;
#  - 3 steps of training under FSDP dp 2 (the frozen base sharded; each rank
#    reads half of it), then the dump (DTRUN_DUMP_PARAMS) holds the base's
#    tensors bit for bit: the frozen weights did not move;
#  - dtrun export --lora adapter: the PEFT folder loads into PyTorch's PEFT
#    LoRA (strict: every tensor used, shapes as declared) and gives dtrun's
#    final validation loss within 1e-5;
#  - dtrun export --lora merged: a Hugging Face folder whose adapted weights
#    are W + alpha / r B A as PyTorch computes it from the base and the
#    adapter (1e-6 of the largest weight), every other tensor the base's bit
#    for bit; PyTorch's Llama loads it and gives dtrun's loss too;
#  - dtrun generate (one process, tp 2: the KV-cache decode with the
#    adapters) and dtrun eval of the LoRA checkpoint give the merged folder's
#    tokens and loss (the base from the checkpoint's model.init_from);
#  - a resume reloads the base from model.init_from: 2 steps, a stop, 2 more
#    equal 4 in one go bit for bit (FSDP dp 2);
#  - a PEFT folder whose r disagrees with train.lora.rank: one line, exit 2.
# Needs Debian's torch (/usr/bin/python3); skips (77) without it.
source "$(dirname "$0")/../parallel/lib.bash"
PY=/usr/bin/python3
source "$ROOT/test/helpers/torch_serve.bash"
torch_serve_start LL "$ROOT/test/helpers/hf_llama.py" || exit 77  # LL ARGS: hf_llama.py ARGS, one PyTorch start-up for all
torch_serve_start PEFT "$ROOT/test/helpers/peft_lora.py" || exit 77  # PEFT ARGS: peft_lora.py ARGS, one PyTorch start-up for all
HF=$T/hf-llama
LL make "$HF" || fail "hf_llama.py make"
ALL=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
PEFT make-adapter "$HF" "$T/ad0" --r 4 --alpha 8 --targets $ALL || fail "peft_lora.py make-adapter"

# lora_job LAYOUT NAME [STEPS]: llama-hf.yaml from the folder, with the adapter
lora_job() {
  layout_job llama-hf "$1" "$T/$2.yaml" "$T/$2.jsonl"
  sed -i -e "s|@HF@|$HF|" -e "s/^  steps: .*/  steps: ${3:-3}/" -e "s/^  lr: .*/  lr: 1.0e-2/" \
    -e "s|^  seed: 7|  seed: 7\n  lora: {init_from: $T/ad0}|" "$T/$2.yaml"
}
vals() { python3 -c 'import json,sys; print(*[json.loads(l)["val_loss"] for l in open(sys.argv[1]) if "val_loss" in l])' "$1"; }
rel_ok() {
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); r=abs(a-b)/abs(b); print(f"rel {r:.2e}"); sys.exit(r>1e-5)' "$1" "$2" >"$T/rel" ||
    fail "$3: dtrun's loss $1 is not PyTorch's $2 ($(cat "$T/rel"))"
  echo "ok: $3: dtrun $1, PyTorch $2 ($(cat "$T/rel"))"
}

# the PEFT adapter into dtrun under tp 2: step 0's loss is PEFT's
lora_job "tp=2" tp 1
"$DTRUN" --print-config "$T/tp.yaml" | grep -A4 "^  lora:" | grep -q "targets: \[q, k, v, o, gate, up, down\]" ||
  fail "adapter_config.json's target_modules did not fill train.lora.targets"
DTRUN_DUMP_VAL=$T/tp.val timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/tp.yaml" >"$T/tp.log" 2>&1 ||
  { tail "$T/tp.log"; fail "tp 2 from init_from + lora.init_from"; }
read -r v0 _ < <(vals "$T/tp.jsonl")
rel_ok "$v0" "$(PEFT loss "$HF" "$T/ad0" "$T/tp.val")" "tp 2: the PEFT adapter loaded into dtrun, step 0"

# training under FSDP: the base stays bit for bit; both exports load in PyTorch
lora_job "dp=2 mode=fsdp" fsdp
printf 'checkpoint:\n  dir: %s\n' "$T/fsdp.ck" >>"$T/fsdp.yaml"
DTRUN_DUMP_VAL=$T/fsdp.val DTRUN_DUMP_PARAMS=$T/fsdp.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/fsdp.yaml" \
  >"$T/fsdp.log" 2>&1 || { tail "$T/fsdp.log"; fail "fsdp 2 training"; }
echo "ok: fsdp 2: $(grep -o 'rank 0: init_from .*' "$T/fsdp.log" | head -1)"
PEFT frozen-check "$HF" "$T/fsdp.bin" --r 4 --targets q,k,v,o,gate,up,down || fail "the frozen base moved"
read -r _ v3 < <(vals "$T/fsdp.jsonl")
"$DTRUN" export --lora adapter "$T/fsdp.ck" "$T/ad1/" 2>"$T/exp.log" || { cat "$T/exp.log"; fail "export --lora adapter"; }
grep -q '"lora_alpha":	8' "$T/ad1/adapter_config.json" || { cat "$T/ad1/adapter_config.json"; fail "adapter_config.json"; }
rel_ok "$v3" "$(PEFT loss "$HF" "$T/ad1" "$T/fsdp.val")" "export --lora adapter in PyTorch's PEFT LoRA, after 3 steps"
"$DTRUN" export --lora merged "$T/fsdp.ck" "$T/merged/" 2>"$T/exp.log" || { cat "$T/exp.log"; fail "export --lora merged"; }
PEFT merged-check "$HF" "$T/ad1" "$T/merged" || fail "the merged folder is not base + alpha / r B A"
rel_ok "$v3" "$(LL loss "$T/merged" "$T/fsdp.val")" "export --lora merged in PyTorch's Llama"

# generate and eval of the LoRA checkpoint: the base from its model.init_from,
# the adapters applied (in the KV-cache decode too): the merged folder's answers
head -c 4000 "$ROOT/README.md" >"$T/text"
gen() { "$DTRUN" generate "$@" --prompt-ids 1,2,3 --max-new-tokens 16 --temperature 0 --ids --no-echo 2>>"$T/gen.err" |
  sed 's/^\[default\/0\]://' | head -1; }
want=$(gen "$T/merged")
[ -n "$want" ] || { cat "$T/gen.err"; fail "generate from the merged folder"; }
for lay in "" "--tp 2"; do
  # shellcheck disable=SC2086
  got=$(gen "$T/fsdp.ck" $lay)
  [ "$got" = "$want" ] || { tail "$T/gen.err"; fail "generate from the LoRA checkpoint ${lay:-on one process}: $got, merged: $want"; }
done
ev() { "$DTRUN" eval "$1" --data "$T/text" --seq-len 32 2>>"$T/gen.err" | sed -n 's/.*loss \([0-9.]*\).*/\1/p' | head -1; }
[ "$(ev "$T/fsdp.ck")" = "$(ev "$T/merged")" ] && [ -n "$(ev "$T/merged")" ] ||
  fail "dtrun eval of the LoRA checkpoint ($(ev "$T/fsdp.ck")) is not the merged folder's ($(ev "$T/merged"))"
echo "ok: generate (one process, tp 2) and eval of the LoRA checkpoint give the merged folder's tokens and loss"

# a resume takes the base from model.init_from again
for x in a b; do lora_job "dp=2 mode=fsdp" "rs-$x" 4; printf 'checkpoint:\n  dir: %s\n  every: 2\n' "$T/rs-$x.ck" >>"$T/rs-$x.yaml"; done
run2() { timeout -k 5 120 env "${@:2}" "$DTRUN" --nproc-per-node=2 "$T/$1.yaml" >>"$T/$1.log" 2>&1 || { tail "$T/$1.log"; fail "$1"; }; }
run2 rs-a DTRUN_DUMP_PARAMS="$T/rs-a.bin"
run2 rs-b DTRUN_TEST_STOP_STEP=2
run2 rs-b DTRUN_DUMP_PARAMS="$T/rs-b.bin"
grep -q "resuming from $T/rs-b.ck/step_000002" "$T/rs-b.log" || { tail "$T/rs-b.log"; fail "no resume"; }
cmp -s "$T/rs-a.bin" "$T/rs-b.bin" || fail "2 + resume + 2 steps differ from 4"
echo "ok: a resume reloads the frozen base from model.init_from: 2 + 2 steps = 4 bit for bit (fsdp 2)"

# a PEFT folder that disagrees with the job: one line at the key, exit 2
lora_job "" bad
sed -i -e "s|lora: {init_from: |lora: {rank: 8, init_from: |" "$T/bad.yaml"
"$DTRUN" --dry-run "$T/bad.yaml" >/dev/null 2>"$T/err"; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "train.lora.rank 8 disagrees with .*adapter_config.json: r 4" "$T/err" ||
  { cat "$T/err"; fail "a disagreeing adapter: exit $rc"; }
echo "ok: $(cat "$T/err")"
torch_serve_stop
echo "ok: PEFT adapters in and out, merged export, the frozen base bit for bit, resume from the base"
