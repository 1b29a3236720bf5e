#!/usr/bin/env bash
# model.init_from: a GPT-2 made in PyTorch (test/helpers/hf_gpt2.py: random
# weights, 2 layers, n_embd 64, 4 heads, vocab 256, 64 positions, saved as
# Hugging Face saves it) loads under dp1, tp2, pp2 and fsdp2:
#  - the loaded weights' validation loss (step 0) equals PyTorch's on the same
#    samples (DTRUN_DUMP_VAL) within 1e-5 relative, under every layout, and
#    with the LM head in chunks of 7 rows (one process and tp 2);
#  - one fine-tuning step gives the one-process loss and parameters
#    (compare.py: loss 1e-5 relative, parameters 1e-4, as every layout test);
#  - every rank of a split layout reads fewer tensor bytes than one process;
#  - a sharded folder (model.safetensors.index.json, 3 files) loads the same;
#  - `dtrun export CKPT DIR/` then init_from round-trips bit for bit.
# Needs Debian's torch (/usr/bin/python3); skips (77) without it.
source "$(dirname "$0")/../parallel/lib.bash"
source "$ROOT/test/helpers/init_from.bash"
PY=/usr/bin/python3
source "$ROOT/test/helpers/torch_serve.bash"
torch_serve_start G2 "$ROOT/test/helpers/hf_gpt2.py" || exit 77  # G2 ARGS: hf_gpt2.py ARGS, one PyTorch start-up for all
HF=$T/hf-gpt2
G2 make "$HF" || fail "hf_gpt2.py make"

# hf_job LAYOUT NAME [HF_DIR]: the job of gpt-hf.yaml under LAYOUT, from HF_DIR
hf_job() {
  layout_job gpt-hf "$1" "$T/$2.yaml" "$T/$2.jsonl"
  sed -i -e "s|@HF@|${3:-$HF}|" "$T/$2.yaml"
}
val0() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][0]["val_loss"])' "$1"; }

hf_job "" ref
DTRUN_DUMP_PARAMS=$T/ref.bin DTRUN_DUMP_VAL=$T/ref.val "$DTRUN" worker "$T/ref.yaml" >"$T/ref.log" 2>&1 ||
  { cat "$T/ref.log"; fail "dp1 run from init_from"; }
torch_loss=$(G2 loss "$HF" "$T/ref.val") || fail "pytorch loss"
ref_bytes=$(sed -n 's/.*read \([0-9]*\) tensor bytes.*/\1/p' "$T/ref.log")
[ -n "$ref_bytes" ] || { cat "$T/ref.log"; fail "no 'read N tensor bytes' line"; }

# same_as_torch NAME: step 0's val_loss is PyTorch's within 1e-5 relative
same_as_torch() {
  local v; v=$(val0 "$T/$1.jsonl")
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); r=abs(a-b)/abs(b); print(f"rel {r:.2e}"); sys.exit(r>1e-5)' "$v" "$torch_loss" >"$T/$1.rel" ||
    fail "$1: dtrun's loss $v is not PyTorch's $torch_loss ($(cat "$T/$1.rel"))"
  echo "ok: $1: loss of the loaded weights $v, PyTorch $torch_loss ($(cat "$T/$1.rel"))"
}
same_as_torch ref

# the LM head in chunks of 7 rows (model.head_chunk_rows; 8 x 32 tokens make 37
# chunks) on one process and over tp 2: PyTorch's loss just the same
for lay in "" "tp=2"; do
  name=chunked${lay:+-$(layout_name "$lay")}
  hf_job "$lay" "$name"
  sed -i -e 's/^model:$/model:\n  head_chunk_rows: 7/' "$T/$name.yaml"
  timeout -k 5 120 "$DTRUN" --nproc-per-node=$(lget "$lay" tp 1) "$T/$name.yaml" >"$T/$name.log" 2>&1 ||
    { tail "$T/$name.log"; fail "${lay:-one process}: head in chunks of 7 rows"; }
  same_as_torch "$name"
done

init_from_layouts hf_job

# a sharded folder: the same weights in 3 files + index
G2 make "$T/hf-sharded" --shards 3 || fail "hf_gpt2.py make --shards 3"
[ -f "$T/hf-sharded/model.safetensors.index.json" ] || fail "no index written"
hf_job "tp=2" sharded "$T/hf-sharded"
DTRUN_DUMP_PARAMS=$T/sharded.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/sharded.yaml" >"$T/sharded.log" 2>&1 ||
  { tail "$T/sharded.log"; fail "tp2 from a sharded folder"; }
cmp -s "$T/sharded.bin" "$T/tp-2.bin" || fail "the sharded folder trains otherwise than the single file"
echo "ok: a sharded folder (index + 3 files) loads the same weights"

# round trip: a run's checkpoint exported as a Hugging Face folder (dtrun
# export CKPT DIR/) and loaded back (dtrun eval DIR loads it as init_from,
# here under fsdp2 while it was saved under tp2): the parameters are the
# checkpoint's, bit for bit (DTRUN_DUMP_PARAMS of both)
hf_job "tp=2" rt
printf 'checkpoint:\n  dir: %s\n' "$T/rt.ck" >>"$T/rt.yaml"
DTRUN_DUMP_PARAMS=$T/rt.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/rt.yaml" >"$T/rt.log" 2>&1 ||
  { tail "$T/rt.log"; fail "rt run"; }
"$DTRUN" export "$T/rt.ck" "$T/rt-hf/" 2>"$T/rt.export.log" || { cat "$T/rt.export.log"; fail "export to a folder"; }
[ -f "$T/rt-hf/config.json" ] && [ -f "$T/rt-hf/model.safetensors" ] || fail "export DIR/ wrote no Hugging Face folder"
head -c 3000 "$ROOT/README.md" >"$T/text"
DTRUN_DUMP_PARAMS=$T/rt-back.bin "$DTRUN" eval "$T/rt-hf" --data "$T/text" --dp 2 --mode fsdp >"$T/rt-back.log" 2>&1 ||
  { cat "$T/rt-back.log"; fail "loading the export back"; }
cmp "$T/rt.bin" "$T/rt-back.bin" || fail "export then init_from is not bit-exact"
torch_serve_stop
echo "ok: dtrun export CKPT DIR/ then init_from: the same $(stat -c %s "$T/rt.bin") parameter bytes, bit for bit"
