#!/usr/bin/env bash
# `dtrun export`: a tiny GPT trained under tp=2 x dp=2 FSDP (sharded rank files)
# is exported to one safetensors file with Hugging Face GPT-2 names, which
# scripts/export_check.py loads (its own small safetensors parser: Debian has no
# `safetensors` package) into a plain PyTorch GPT-2 module; on the validation
# samples dtrun evaluated (DTRUN_DUMP_VAL) it must give dtrun's validation loss
# within 1e-4; the same for a vocabulary of 67 rows that tp splits unevenly
# (gpt-odd-vocab), whose export must be a whole [67, C] wte. Needs Debian's python3-torch (installed through scripts/deps.sh
# when possible), else skips (77).
source "$(dirname "$0")/../parallel/ckpt.bash"
# EXPORT_CHECK ARGS: scripts/export_check.py ARGS under /usr/bin/python3 (one PyTorch start-up for both)
source "$ROOT/test/helpers/torch_serve.bash"
if ! torch_serve_start EXPORT_CHECK "$ROOT/scripts/export_check.py" >/dev/null; then
  DTRUN_EXTRA_DEPS=python3-torch "$ROOT/scripts/deps.sh" >/dev/null 2>&1
  rm -rf "$T/torch-EXPORT_CHECK"
  torch_serve_start EXPORT_CHECK "$ROOT/scripts/export_check.py" >/dev/null ||
    { echo "skip: python3-torch is not installed and cannot be"; exit 77; }
fi

STEPS=30
lay="dp=2 tp=2 mode=fsdp"
# export_model MODEL VOCAB: train MODEL under $lay, export, check in PyTorch; the
# exported wte must be [VOCAB, C] whole, however tp split its rows
export_model() {
  local model=$1 vocab=$2 d=$T/export-$1 val out
  ckpt_job "$model" "$lay" "$d.yaml" "$d.jsonl" "$d.ck"
  sed -i -e 's/^  eval_batches: .*/  eval_batches: 4/' "$d.yaml"
  ckpt_run "$lay" "$d.yaml" "$d.log" DTRUN_DUMP_VAL="$d.val" || { tail "$d.log"; fail "$model: training"; }
  "$DTRUN" export "$d.ck" "$d.safetensors" 2>"$d.export.log" || { cat "$d.export.log"; fail "$model: dtrun export exited $?"; }
  grep -q "exported $d.ck/step_000030 (step 30)" "$d.export.log" || { cat "$d.export.log"; fail "$model: no export line"; }
  val=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][-1]["val_loss"])' "$d.jsonl")
  out=$(EXPORT_CHECK "$d.safetensors" "$d.val" --n-head 4 --expect "$val" --tol 1e-4 2>&1) ||
    { echo "$out"; fail "$model: the exported model's validation loss is not dtrun's"; }
  [[ $out == *"vocab $vocab)"* ]] || { echo "$out"; fail "$model: exported wte is not [$vocab, C]"; }
  echo "ok: $model: $out"
}
export_model gpt-tiny 64
# 67 rows, 33 + 34 over tp 2: the export still writes one [67, 32] wte
export_model gpt-odd-vocab 67
torch_serve_stop
d=$T/export-gpt-tiny

# what the export refuses: a missing checkpoint, a bad command line
"$DTRUN" export "$T/none" "$T/x.safetensors" 2>"$d.err"; rc=$?
[ $rc = 6 ] && grep -q "no checkpoint here" "$d.err" || { cat "$d.err"; fail "export of nothing: exit $rc, want 6"; }
"$DTRUN" export "$d.ck" 2>"$d.err"; rc=$?
[ $rc = 2 ] || fail "export without an output: exit $rc, want 2"
echo "ok: export of a missing checkpoint exits 6, a bad command line 2"
