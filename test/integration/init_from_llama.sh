#!/usr/bin/env bash
# Hugging Face Llama in and out (issue 27 item 4). A Llama written by a
# PyTorch Llama implemented in the test (test/helpers/hf_llama.py: random
# weights, GQA 4 heads over 2 kv heads, untied head, rotate-half RoPE,
# LlamaForCausalLM's names and config.json):
#  - model.init_from: the loaded weights' validation loss (step 0) equals
#    PyTorch's on the same samples (DTRUN_DUMP_VAL) within 1e-5 relative on
#    one process, tp 2, pp 2 and FSDP 2; one fine-tuning step gives the
#    one-process loss and parameters there (compare.py: 1e-5, 1e-4); each rank
#    reads only its slices; a sharded folder (3 files + index) loads the same;
#    a tied-head Llama (tie_word_embeddings) and a multi-query one under tp 2
#    (its one kv head replicated) give PyTorch's loss too;
#  - dtrun generate: 32 greedy tokens equal PyTorch's (whole prefix each
#    step) on one process, tp 2, pp 2 and tp 2 x pp 2 (the KV cache holding
#    kv heads only);
#  - dtrun eval of the folder gives PyTorch's loss under tp 2 x pp 2;
#  - dtrun export CKPT DIR/ of a fine-tuned Llama (trained under tp 2) is a
#    folder the PyTorch Llama loads (strict names and shapes) and whose loss
#    on dtrun's validation samples is dtrun's own within 1e-5; exported in
#    shards (--max-shard-size) it loads the same, and init_from of the export
#    gives the checkpoint's parameters bit for bit;
#  - a config.json field dtrun cannot honour (rope_scaling of rope_type
#    llama3, attention_bias, sliding_window, hidden_act gelu, another
#    architecture) is one line naming it, exit 2.
# Needs Debian's torch (/usr/bin/python3); skips (77) without it.
source "$(dirname "$0")/../parallel/lib.bash"
source "$ROOT/test/helpers/init_from.bash"
# LL ARGS: hf_llama.py ARGS under /usr/bin/python3, one PyTorch start-up for all
source "$ROOT/test/helpers/torch_serve.bash"
torch_serve_start LL "$ROOT/test/helpers/hf_llama.py" || exit 77
HF=$T/hf-llama
LL make "$HF" || fail "hf_llama.py make"

# hf_job LAYOUT NAME [HF_DIR]: the job of llama-hf.yaml under LAYOUT, from HF_DIR
hf_job() {
  layout_job llama-hf "$1" "$T/$2.yaml" "$T/$2.jsonl"
  sed -i -e "s|@HF@|${3:-$HF}|" "$T/$2.yaml"
}
val0() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][0]["val_loss"])' "$1"; }
# rel_ok A B WHAT: |A - B| / |B| <= 1e-5
rel_ok() {
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); r=abs(a-b)/abs(b); print(f"rel {r:.2e}"); sys.exit(r>1e-5)' "$1" "$2" >"$T/rel" ||
    fail "$3: dtrun's loss $1 is not PyTorch's $2 ($(cat "$T/rel"))"
  echo "ok: $3: dtrun $1, PyTorch $2 ($(cat "$T/rel"))"
}

hf_job "" ref
DTRUN_DUMP_PARAMS=$T/ref.bin DTRUN_DUMP_VAL=$T/ref.val "$DTRUN" worker "$T/ref.yaml" >"$T/ref.log" 2>&1 ||
  { cat "$T/ref.log"; fail "one process from init_from"; }
grep -q "^  kind: llama" <("$DTRUN" --print-config "$T/ref.yaml") || fail "the folder's model_type did not make the job a llama"
torch_loss=$(LL loss "$HF" "$T/ref.val") || fail "pytorch loss"
ref_bytes=$(sed -n 's/.*read \([0-9]*\) tensor bytes.*/\1/p' "$T/ref.log")
[ -n "$ref_bytes" ] || { cat "$T/ref.log"; fail "no 'read N tensor bytes' line"; }
same_as_torch() { rel_ok "$(val0 "$T/$1.jsonl")" "$torch_loss" "$1: loss of the loaded weights"; }
same_as_torch ref
init_from_layouts hf_job

# a sharded folder: the same weights in 3 files + index
LL make "$T/hf-sharded" --shards 3 || fail "hf_llama.py make --shards 3"
[ -f "$T/hf-sharded/model.safetensors.index.json" ] || fail "no index written"
hf_job "tp=2" sharded "$T/hf-sharded"
DTRUN_DUMP_PARAMS=$T/sharded.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/sharded.yaml" >"$T/sharded.log" 2>&1 ||
  { tail "$T/sharded.log"; fail "tp2 from a sharded folder"; }
cmp -s "$T/sharded.bin" "$T/tp-2.bin" || fail "the sharded folder trains otherwise than the single file"
echo "ok: a sharded folder (index + 3 files) loads the same weights"

# a tied head on one process; multi-query (one kv head) replicated over tp 2
for v in "tied --tied" "mqa --kv-heads 1"; do
  name=${v%% *}
  # shellcheck disable=SC2086
  LL make "$T/hf-$name" ${v#* } --seed 3 || fail "hf_llama.py make $name"
  lay=""; [ "$name" = mqa ] && lay="tp=2"
  hf_job "$lay" "$name" "$T/hf-$name"
  DTRUN_DUMP_VAL=$T/$name.val timeout -k 5 120 "$DTRUN" --nproc-per-node=$(lget "$lay" tp 1) "$T/$name.yaml" \
    >"$T/$name.log" 2>&1 || { tail "$T/$name.log"; fail "$name: run from init_from"; }
  rel_ok "$(val0 "$T/$name.jsonl")" "$(LL loss "$T/hf-$name" "$T/$name.val")" "$name${lay:+ ($lay)}"
done

# dtrun generate: PyTorch's 32 greedy tokens under every layout
torch_ids=$(LL greedy "$HF" --prompt-ids 1,2,3 --n 32 2>"$T/margin") || fail "pytorch greedy"
gen() { "$DTRUN" generate "$@" 2>>"$T/gen.err" | sed 's/^\[default\/0\]://' | head -1; }
for lay in "" "--tp 2" "--pp 2" "--tp 2 --pp 2"; do
  # shellcheck disable=SC2086
  ids=$(gen "$HF" --prompt-ids 1,2,3 --max-new-tokens 32 --temperature 0 --ids --no-echo $lay)
  [ "$ids" = "$torch_ids" ] || { echo "dtrun:   $ids"; echo "pytorch: $torch_ids"; tail "$T/gen.err"; fail "greedy tokens ${lay:-on one process} differ from PyTorch's"; }
  echo "ok: 32 greedy tokens ${lay:-on one process} = PyTorch's ($(cat "$T/margin"))"
done

# dtrun eval of the folder under tp 2 x pp 2: PyTorch's loss on eval's samples
head -c 4000 "$ROOT/README.md" >"$T/text"
"$DTRUN" eval "$HF" --data "$T/text" --tp 2 --pp 2 --seq-len 32 >"$T/eval.out" 2>"$T/eval.err" ||
  { cat "$T/eval.err"; fail "dtrun eval of the folder under tp 2 x pp 2"; }
eval_loss=$(sed -n 's/.*loss \([0-9.]*\).*/\1/p' "$T/eval.out" | head -1)
[ -n "$eval_loss" ] || { cat "$T/eval.out"; fail "dtrun eval printed no loss"; }
rel_ok "$eval_loss" "$(LL loss-file "$HF" "$T/text" --seq-len 32)" "dtrun eval --tp 2 --pp 2 of the folder"

# export: a Llama fine-tuned under tp 2, exported, loads into the PyTorch Llama
hf_job "tp=2" rt
sed -i -e 's/^  steps: .*/  steps: 3/' "$T/rt.yaml"
printf 'checkpoint:\n  dir: %s\n' "$T/rt.ck" >>"$T/rt.yaml"
DTRUN_DUMP_PARAMS=$T/rt.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/rt.yaml" >"$T/rt.log" 2>&1 ||
  { tail "$T/rt.log"; fail "fine-tuning run"; }
"$DTRUN" export "$T/rt.ck" "$T/rt-hf/" 2>"$T/rt.export.log" || { cat "$T/rt.export.log"; fail "export to a folder"; }
python3 - "$T/rt-hf/config.json" <<'EOF' || fail "the export's config.json"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
        "max_position_embeddings": 64, "rope_theta": 10000, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
assert not bad, bad
EOF
DTRUN_DUMP_PARAMS=$T/rt-back.bin "$DTRUN" eval "$T/rt-hf" --data "$T/text" --seq-len 32 \
  >"$T/rt-back.out" 2>"$T/rt-back.log" || { cat "$T/rt-back.log"; fail "loading the export back"; }
cmp "$T/rt.bin" "$T/rt-back.bin" || fail "export then init_from is not bit-exact"
back_loss=$(sed -n 's/.*loss \([0-9.]*\).*/\1/p' "$T/rt-back.out" | head -1)
rt_torch=$(LL loss-file "$T/rt-hf" "$T/text" --seq-len 32) || fail "PyTorch cannot load the export"
rel_ok "$back_loss" "$rt_torch" "dtrun export of a tp-2 fine-tune in PyTorch's Llama (strict names and shapes)"
echo "ok: init_from of the export gives the checkpoint's parameters bit for bit"
"$DTRUN" export --max-shard-size 100KB "$T/rt.ck" "$T/rt-shards/" 2>"$T/rt.shards.log" || { cat "$T/rt.shards.log"; fail "sharded export"; }
n_shards=$(ls "$T/rt-shards"/model-*-of-*.safetensors | wc -l)
[ "$n_shards" -gt 1 ] && [ -f "$T/rt-shards/model.safetensors.index.json" ] || fail "--max-shard-size 100KB wrote $n_shards files"
[ "$(LL loss-file "$T/rt-shards" "$T/text" --seq-len 32)" = "$rt_torch" ] ||
  fail "the sharded export does not load as the single file"
DTRUN_DUMP_PARAMS=$T/rt-shards.bin "$DTRUN" eval "$T/rt-shards" --data "$T/text" --seq-len 32 >/dev/null 2>"$T/rt-shards.log" ||
  { cat "$T/rt-shards.log"; fail "init_from the sharded export"; }
cmp -s "$T/rt.bin" "$T/rt-shards.bin" || fail "the sharded export is not the checkpoint's parameters"
echo "ok: --max-shard-size 100KB: $n_shards shard files + index, PyTorch and init_from read them as the single file"

# config.json fields dtrun cannot honour: one line naming the field, exit 2
refuse() { # NAME EXPECT EXTRA...
  local d=$T/hf-$1 want=$2; shift 2
  # the reference folder with config.json's keys overridden (hf_llama.py make
  # --extra's rule, K=JSON): the weights do not matter to a refusal, and no
  # PyTorch start-up is paid for each of the five
  cp -r "$HF" "$d" || fail "copy $HF"
  python3 - "$d/config.json" "$@" <<'EOF_PY' || fail "config.json of $d"
import json, sys
c = json.load(open(sys.argv[1]))
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    c[k] = json.loads(v)
json.dump(c, open(sys.argv[1], "w"), indent=2)
EOF_PY
  hf_job "" "bad-$(basename "$d")" "$d"
  "$DTRUN" worker "$T/bad-$(basename "$d").yaml" >/dev/null 2>"$T/err"; local rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "$want" "$T/err" ||
    { cat "$T/err"; fail "$d: exit $rc, want 2 and one line with '$want'"; }
  echo "ok: refused in one line: $(cat "$T/err")"
}
refuse rope-scaling "rope_scaling of rope_type llama3 is not supported" \
  'rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}'
refuse attention-bias "attention_bias true is not supported" 'attention_bias=true'
refuse sliding "sliding_window 4096 is not supported" 'sliding_window=4096'
refuse gelu "hidden_act gelu is not supported" 'hidden_act="gelu"'
refuse mistral "architectures MistralForCausalLM is not LlamaForCausalLM" 'architectures=["MistralForCausalLM"]'
torch_serve_stop
echo "ok: Hugging Face Llama in (1, tp 2, pp 2, fsdp 2; sharded; tied; MQA) and out (export, sharded), generate and eval"
