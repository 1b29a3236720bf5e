#!/usr/bin/env bash
# model.init_from for ViT: a ViTForImageClassification made in PyTorch
# (test/helpers/hf_vit.py: random weights, 2 layers, hidden 32, 4 heads,
# 8x8 images of 1 channel in 4x4 patches, 10 classes, exact erf GELU and
# layernorm eps 1e-12 as google/vit-base-patch16-224, Hugging Face's names,
# query/key/value apart) loads under dp1, tp2, pp2 and fsdp2:
#  - the loaded weights' validation loss (step 0, 16 IDX images) equals
#    PyTorch's on the same images within 1e-5 relative, under every layout;
#  - one fine-tuning step gives the one-process loss and parameters;
#  - every rank of a split layout reads fewer tensor bytes than one process;
#  - a sharded folder (index + 3 files) loads the same;
#  - a folder with GPT-2's tanh GELU and eps 1e-5 loads as that (model.activation
#    gelu_tanh) and matches PyTorch too;
#  - `dtrun export CKPT DIR/` writes a ViT folder (config.json,
#    preprocessor_config.json, query/key/value apart) that init_from loads back
#    bit for bit, and that PyTorch's model loads (same loss as dtrun's eval).
# Needs Debian's torch (/usr/bin/python3); skips (77) without it.
source "$(dirname "$0")/../parallel/lib.bash"
source "$ROOT/test/helpers/init_from.bash"
PY=/usr/bin/python3
source "$ROOT/test/helpers/torch_serve.bash"
torch_serve_start VT "$ROOT/test/helpers/hf_vit.py" || exit 77  # VT ARGS: hf_vit.py ARGS, one PyTorch start-up for all
HF=$T/hf-vit
VT make "$HF" || fail "hf_vit.py make"
"$PY" "$ROOT/test/helpers/idx_set.py" "$T/data" || fail "idx_set.py"
torch_loss=$(VT loss "$HF" "$T/data/val-images-idx3-ubyte" "$T/data/val-labels-idx1-ubyte") ||
  fail "pytorch loss"

# vit_job LAYOUT NAME [HF_DIR]
vit_job() {
  layout_job vit-hf "$1" "$T/$2.yaml" "$T/$2.jsonl"
  sed -i -e "s|@HF@|${3:-$HF}|" -e "s|@DATA@|$T/data|" "$T/$2.yaml"
}
val0() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][0]["val_loss"])' "$1"; }
# same_as_torch NAME [TORCH_LOSS]: step 0's val_loss is PyTorch's within 1e-5 relative
same_as_torch() {
  local v want=${2:-$torch_loss}; v=$(val0 "$T/$1.jsonl")
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); r=abs(a-b)/abs(b); print(f"rel {r:.2e}"); sys.exit(r>1e-5)' "$v" "$want" >"$T/$1.rel" ||
    fail "$1: dtrun's loss $v is not PyTorch's $want ($(cat "$T/$1.rel"))"
  echo "ok: $1: loss of the loaded weights $v, PyTorch $want ($(cat "$T/$1.rel"))"
}

vit_job "" ref
"$DTRUN" --print-config "$T/ref.yaml" >"$T/ref.config" || fail "print-config"
grep -q '^  activation: gelu$' "$T/ref.config" && grep -q '^  norm_eps: 1e-12$' "$T/ref.config" ||
  { cat "$T/ref.config"; fail "config.json's hidden_act gelu / layer_norm_eps 1e-12 did not reach the job"; }
echo "ok: config.json filled model.activation gelu, model.norm_eps 1e-12"
DTRUN_DUMP_PARAMS=$T/ref.bin "$DTRUN" worker "$T/ref.yaml" >"$T/ref.log" 2>&1 || { cat "$T/ref.log"; fail "dp1 run from init_from"; }
ref_bytes=$(sed -n 's/.*read \([0-9]*\) tensor bytes.*/\1/p' "$T/ref.log")
[ -n "$ref_bytes" ] || { cat "$T/ref.log"; fail "no 'read N tensor bytes' line"; }
same_as_torch ref

init_from_layouts vit_job

# a sharded folder: the same weights in 3 files + index
VT make "$T/hf-sharded" --shards 3 || fail "hf_vit.py make --shards 3"
vit_job "tp=2" sharded "$T/hf-sharded"
DTRUN_DUMP_PARAMS=$T/sharded.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/sharded.yaml" >"$T/sharded.log" 2>&1 ||
  { tail "$T/sharded.log"; fail "tp2 from a sharded folder"; }
cmp -s "$T/sharded.bin" "$T/tp-2.bin" || fail "the sharded folder trains otherwise than the single file"
echo "ok: a sharded folder (index + 3 files) loads the same weights"

# GPT-2's choices in a ViT folder: tanh GELU, eps 1e-5 (model.activation gelu_tanh)
VT make "$T/hf-tanh" --act gelu_pytorch_tanh --eps 1e-5 --seed 3 || fail "make tanh"
tanh_loss=$(VT loss "$T/hf-tanh" "$T/data/val-images-idx3-ubyte" "$T/data/val-labels-idx1-ubyte")
vit_job "tp=2" tanh "$T/hf-tanh"
timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/tanh.yaml" >"$T/tanh.log" 2>&1 || { tail "$T/tanh.log"; fail "tanh folder"; }
same_as_torch tanh "$tanh_loss"

# round trip: a tp2 run's checkpoint exported as a Hugging Face ViT folder,
# loaded back under fsdp2 (dtrun eval DIR: init_from): the same parameters
# bit for bit; and PyTorch's model of the folder gives dtrun's eval loss
vit_job "tp=2" rt
printf 'checkpoint:\n  dir: %s\n' "$T/rt.ck" >>"$T/rt.yaml"
DTRUN_DUMP_PARAMS=$T/rt.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/rt.yaml" >"$T/rt.log" 2>&1 ||
  { tail "$T/rt.log"; fail "rt run"; }
"$DTRUN" export "$T/rt.ck" "$T/rt-hf/" 2>"$T/rt.export.log" || { cat "$T/rt.export.log"; fail "export to a folder"; }
for f in config.json preprocessor_config.json model.safetensors; do [ -f "$T/rt-hf/$f" ] || fail "export DIR/ wrote no $f"; done
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(not (c["hidden_act"] == "gelu" and c["layer_norm_eps"] == 1e-12))' "$T/rt-hf/config.json" ||
  { cat "$T/rt-hf/config.json"; fail "the exported config.json lost the activation or eps"; }
grep -q 'attention.attention.query.weight' "$T/rt-hf/model.safetensors" || fail "the export has no separate query weight"
DTRUN_DUMP_PARAMS=$T/rt-back.bin "$DTRUN" eval "$T/rt-hf" --data "$T/data/val-images-idx3-ubyte" --batch 8 --dp 2 --mode fsdp \
  >"$T/rt-back.log" 2>&1 || { cat "$T/rt-back.log"; fail "loading the export back"; }
cmp "$T/rt.bin" "$T/rt-back.bin" || fail "export then init_from is not bit-exact"
echo "ok: dtrun export CKPT DIR/ then init_from: the same $(stat -c %s "$T/rt.bin") parameter bytes, bit for bit"
eval_loss=$(sed -n 's/.*: loss \([0-9.]*\) .*/\1/p' "$T/rt-back.log")
rt_torch=$(VT loss "$T/rt-hf" "$T/data/val-images-idx3-ubyte" "$T/data/val-labels-idx1-ubyte") ||
  fail "PyTorch cannot load the exported folder"
python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b)/b>1e-5)' "$eval_loss" "$rt_torch" ||
  fail "the exported folder's loss in PyTorch $rt_torch is not dtrun eval's $eval_loss"
torch_serve_stop
echo "ok: PyTorch loads the exported folder: loss $rt_torch, dtrun eval $eval_loss"
