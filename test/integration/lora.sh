#!/usr/bin/env bash
# train.lora under the layouts (issue 29 item 3). The tiny Llama and GPT with
# LoRA on their linear layers and dropout 0.1 (test/parallel/llama-lora.yaml,
# gpt-lora.yaml; the masks are drawn per token of the global batch and feature
# of the layer's whole input, so every layout must drop the same elements),
# synthetic data, 12 steps, their base frozen:
#  - tp 2 (A whole and B's rows split on a column-parallel base, A's columns
#    split and B whole on a row-parallel one), tp 2 + SP, pp 2, FSDP (the
#    frozen base a group of its own: sharded, gathered, never reduced), ZeRO-2
#    with accumulation, cp 2 and tp 2 x pp 2 with recompute reproduce the
#    one-process LoRA curve with parallel_equivalence.sh's tolerances (losses
#    within 1e-5 relative, final parameters, the adapters and the frozen base,
#    within 1e-4); bf16 under dp 2 and tp 2 with parallel_bf16.sh's (1e-3,
#    1.6e-2) at lr 1e-3 (at 1e-2 AdamW moves an element of A by a whole lr
#    wherever its small gradient's sign is rounding noise, B starting at 0);
#  - an exact stop-and-resume under dp 2 x tp 2: the checkpoint holds the
#    adapters and their AdamW moments, the base is drawn again from the seed;
#    resharding from tp 2 to FSDP pipeline stages;
#  - memory measured: under FSDP dp 4 a rank's gradients and optimizer state
#    are the adapters' only (they scale with the adapters' share of the base,
#    against the full fine-tune's), its parameters the base's shard plus the
#    adapters', and the dry-run predicts rank 0's params, grads, optimizer
#    and total allocated bytes exactly;
#  - bad input: rank 0, alpha 0, dropout 1, gate on a GPT, an unknown target,
#    zb-h1, a PEFT folder that disagrees: one line at the key, exit 2; export
#    of a LoRA checkpoint without --lora, or --lora of a plain one: exit 6.
# DTRUN_TEST_FULL=1 adds the rest of the layouts. PyTorch's side (PEFT's LoRA,
# merged export, the frozen base bit for bit): lora_hf.sh.
source "$(dirname "$0")/../parallel/ckpt.bash"

# ---- bad input: one line, exit 2 ----
bad() { # WHAT WANT TRAIN_LINE [MODEL]
  local model=${4:-"{kind: gpt, n_layer: 2, n_head: 4, d_model: 32, vocab_size: 64, seq_len: 16}"}
  printf 'model: %s\ntrain:\n  steps: 2\n  %s\n' "$model" "$3" >"$T/bad.yaml"
  "$DTRUN" --dry-run "$T/bad.yaml" >/dev/null 2>"$T/err"; local rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "$2" "$T/err" && grep -q "bad.yaml:4:" "$T/err" ||
    { cat "$T/err"; fail "$1: exit $rc, want 2 and one line at bad.yaml:4 with '$2'"; }
  echo "ok: $1: $(cat "$T/err")"
}
bad "rank 0" "train.lora.rank must be >= 1" "lora: {rank: 0}"
bad "alpha 0" "train.lora.alpha must be > 0" "lora: {rank: 4, alpha: 0}"
bad "dropout 1" "train.lora.dropout must be >= 0 and < 1" "lora: {dropout: 1}"
bad "gate on a gpt" "a gpt model has no gate" "lora: {targets: [q, gate]}"
bad "an unknown target" "unknown name 'q_proj'.*did you mean 'q'" "lora: {targets: [q_proj]}"
bad "a misspelt key" "unknown key 'rnak' in section 'train.lora'" "lora: {rnak: 4}"
bad "lora on a vit" "applies to gpt and llama models only" "lora: {rank: 4}" "{kind: vit}"
bad "lora with moe" "train.lora with model.moe" "lora: {rank: 4}" \
  "{kind: llama, n_layer: 2, n_head: 4, d_model: 32, vocab_size: 64, seq_len: 16, moe: {experts: 4}}"
printf 'model: {kind: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, vocab_size: 64, seq_len: 16}\n' >"$T/zb.yaml"
printf 'train: {steps: 2, global_batch: 8, micro_batch: 2, lora: {rank: 4}}\nparallel: {pp: 2, pp_schedule: zb-h1}\n' >>"$T/zb.yaml"
"$DTRUN" --dry-run "$T/zb.yaml" >/dev/null 2>"$T/err"
[ $? = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "zb-h1 with train.lora" "$T/err" || { cat "$T/err"; fail "zb-h1 + lora"; }
echo "ok: zb-h1: $(cat "$T/err")"

# ---- the layouts reproduce the one-process LoRA curve ----
FP32=("tp=2" "tp=2 sp=1" "pp=2 sched=1f1b" "dp=2 mode=fsdp" "dp=2 mode=zero2 accum=2" "cp=2"
      "dp=2 tp=2 pp=2 sched=1f1b recompute=block")
GPT=("tp=2" "pp=2 sched=1f1b" "dp=2 mode=fsdp")
BF16=("dp=2 prec=bf16" "tp=2 sp=1 prec=bf16")
if [ "${DTRUN_TEST_FULL:-0}" = 1 ]; then
  FP32+=("dp=2" "dp=2 mode=zero1" "dp=4 mode=hsdp nodes=2" "pp=2 sched=interleaved tp=2" "dp=2 tp=2 mode=fsdp"
         "dp=2 mode=fsdp recompute=block" "pp=2 sched=1f1b tp=2 recompute=selective attn=naive" "dp=2 offload=1"
         "cp=2 tp=2" "dp=2 cp=2 mode=zero2")
  GPT+=("tp=2 sp=1" "cp=2" "dp=2 tp=2 mode=zero2" "pp=2 sched=gpipe dp=2 mode=zero1")
  BF16+=("tp=2 prec=bf16" "dp=2 mode=fsdp prec=bf16" "pp=2 sched=1f1b prec=bf16" "cp=2 prec=bf16"
         "dp=2 mode=zero2 accum=2 prec=bf16 recompute=block")
fi
for lay in "${FP32[@]}"; do run_layout llama-lora "$lay"; done
for lay in "${GPT[@]}"; do run_layout gpt-lora "$lay"; done
LOSS_RTOL=1e-3 PARAM_ATOL=1.6e-2
for lay in "${BF16[@]}"; do run_layout llama-lora-bf16 "$lay"; done
LOSS_RTOL=1e-5 PARAM_ATOL=1e-4
summary
[ $FAILS -eq 0 ] || fail "$FAILS LoRA layouts differ from one process"

# ---- exact resume: the adapters and their moments from the checkpoint ----
ckpt_exact llama-lora "dp=2 tp=2" # 20 steps, a stop, 20 more (ckpt.bash)
ls "$T"/exact-llama-lora-*-b.ck/step_000040/*.safetensors >/dev/null || fail "no checkpoint files"
python3 - "$T"/exact-llama-lora-dp-2_tp-2-b.ck/step_000040 <<'EOF' || fail "the LoRA checkpoint holds more than the adapters"
import glob, json, struct, sys
names = set()
for f in glob.glob(sys.argv[1] + "/rank_*.safetensors"):
    raw = open(f, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    names |= {k.split("/", 1)[1] for k in json.loads(raw[8:8 + n]) if k != "__metadata__" and "/" in k}
base = sorted(k for k in names if ".lora." not in k)
assert not base, f"base tensors saved: {base[:4]}"
print(f"ok: the checkpoint holds {len(names)} adapter tensors (params and AdamW moments), no base tensor")
EOF

# resharding: the adapters saved under tp 2 load into FSDP pipeline stages
reshard llama-lora "tp=2" "pp=2 sched=1f1b dp=2 mode=fsdp"

# ---- memory: no gradients, no optimizer state for the frozen base ----
mem_job() { # NAME MODEL LAYOUT
  layout_job "$2" "$3" "$T/$1.yaml" "$T/$1.jsonl"
  sed -i -e 's/^  n_layer: .*/  n_layer: 4/' -e 's/^  d_model: .*/  d_model: 64/' -e 's/^  steps: .*/  steps: 2/' "$T/$1.yaml"
  timeout -k 5 120 "$DTRUN" --nproc-per-node=4 "$T/$1.yaml" >"$T/$1.log" 2>&1 || { tail "$T/$1.log"; fail "$1 did not train"; }
  "$DTRUN" --dry-run --format=json "$T/$1.yaml" >"$T/$1.dry.json" 2>"$T/$1.dry.err" || { cat "$T/$1.dry.err"; fail "$1 dry-run"; }
}
mem_job full llama-tiny "dp=4 mode=fsdp"
mem_job lora llama-lora "dp=4 mode=fsdp"
python3 - "$T" <<'PY' || fail "LoRA's memory is not what it should be"
import glob, json, sys
T = sys.argv[1]
def peak(name):
    return json.loads([l for l in open(sorted(glob.glob(f"{T}/{name}.rank0.jsonl"))[0]) if l.strip()][-1])["mem_peak"]
full, lora = peak("full"), peak("lora")
go = lambda m: m["grads"] + m["optimizer"]
frac = go(lora) / go(full)
print(f"fsdp dp=4 rank 0: full fine-tune params {full['params']} grads {full['grads']} optimizer {full['optimizer']}; "
      f"lora params {lora['params']} grads {lora['grads']} optimizer {lora['optimizer']}: grads + optimizer "
      f"{100 * frac:.2f} % of the full fine-tune's")
m = json.load(open(f"{T}/lora.dry.json"))["model"]
train, frozen = m["parameters_trainable"], m["parameters_frozen"]
# the adapters' share of the base: what gradients and AdamW keep, and the
# parameters the base's shard plus the adapters' (comm_chunk's shares of 4)
assert abs(frac / (train / frozen) - 1) < 0.05, f"grads + optimizer scale as {frac:.4f}, the adapters as {train / frozen:.4f}"
assert abs(lora["params"] / full["params"] - (frozen + train) / frozen) < 0.05, "params are not the base's + the adapters'"
print(f"ok: {train} adapter parameters train over a frozen base of {frozen}: gradients and optimizer state scale with "
      f"the adapters ({100 * frac:.1f} % of the full fine-tune's), parameters with the base")
dry = json.load(open(f"{T}/lora.dry.json"))["stages"][0]["memory"]
assert (dry["params"], dry["grads"], dry["optimizer"], dry["allocated"]) == \
    (lora["params"], lora["grads"], lora["optimizer"], lora["total"]), \
    f"dry-run {dry['params']} {dry['grads']} {dry['optimizer']} {dry['allocated']} vs measured"
print(f"ok: the dry-run predicts rank 0's params {dry['params']}, grads {dry['grads']}, optimizer {dry['optimizer']}, "
      f"all it allocates {dry['allocated']} (the adapters' scratch in the activations' working set included)")
PY
"$DTRUN" --dry-run "$T/lora.yaml" | grep -q "^lora  .* trainable (rank 4, alpha 8 on q, k, v, o, gate, up, down), .* frozen" ||
  fail "the dry-run does not say what trains"

# ---- export: a LoRA checkpoint needs --lora; a plain one refuses it ----
ck=$(ls -d "$T"/exact-llama-lora-*-b.ck | head -1)
one_line_exit 6 "plain export of a LoRA checkpoint" export "$ck" "$T/x/"
ckpt_job llama-tiny "pp=1" "$T/plain.yaml" "$T/plain.jsonl" "$T/plain.ck"
sed -i -e 's/^  steps: .*/  steps: 1/' "$T/plain.yaml"
"$DTRUN" worker "$T/plain.yaml" >"$T/plain.log" 2>&1 || { cat "$T/plain.log"; fail "plain run"; }
one_line_exit 6 "--lora of a checkpoint without LoRA" export --lora adapter "$T/plain.ck" "$T/y/"
one_line_exit 2 "--lora to a file" export --lora merged "$ck" "$T/z.safetensors"

# ---- LoRA on packed instruction data (data.kind sft): tp 2 and pp 2 give one process's losses ----
python3 "$ROOT/test/helpers/sft_torch.py" write "$T/sft.bin" --samples 200 --vocab 64 --min-len 1 --max-len 24 \
  --no-targets 5 --seed 1 || fail "writing the SFT shard"
for lay in 1 tp pp; do
  sed -e "s|@SFT@|$T/sft.bin|" -e '/^log:$/,$d' "$ROOT/test/parallel/sft-llama.yaml" >"$T/sft-$lay.yaml"
  printf '  lora: {rank: 4, alpha: 8, dropout: 0.1, targets: [q, k, v, o, gate, up, down]}\n' >>"$T/sft-$lay.yaml"
  printf 'log: {progress: off, metrics: %s}\n' "$T/sft-$lay.jsonl" >>"$T/sft-$lay.yaml"
  case $lay in tp) printf 'parallel: {tp: 2}\n' ;; pp) printf 'parallel: {pp: 2, microbatches: 4}\n' ;; esac >>"$T/sft-$lay.yaml"
  n=2; [ $lay = 1 ] && n=1
  timeout -k 5 120 "$DTRUN" --nproc-per-node=$n "$T/sft-$lay.yaml" >"$T/sft-$lay.log" 2>&1 ||
    { tail -5 "$T/sft-$lay.log"; fail "LoRA on sft data ($lay)"; }
done
python3 - "$T"/sft-{1,tp,pp}.jsonl <<'PY' || fail "LoRA on sft data: the layouts differ"
import json, sys
runs = [[json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:]]
assert len(runs[0]) == 10, runs[0]
for r in runs[1:]:
    worst = max(abs(a - b) / abs(a) for a, b in zip(runs[0], r))
    assert len(r) == 10 and worst <= 1e-5, (r, runs[0])
print(f"ok: LoRA on data.kind sft: tp 2 and pp 2 give one process's losses ({runs[0][0]:.4f} -> {runs[0][-1]:.4f})")
PY
echo "ok: train.lora under the layouts, exact resume, memory, bad input, sft data"
