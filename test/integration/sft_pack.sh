#!/usr/bin/env bash
# Fine-tuning on packed instruction data (issue 29 item 2): data.kind sft.
#  - layouts: the tiny Llama (RoPE positions) and GPT (learned positions)
#    fine-tuned on SFT shards (random samples of 1 to 24 tokens, prompts
#    masked out, some samples without targets, some longer than seq_len 16 and
#    truncated) reproduce the one-process curve and parameters under dp,
#    ZeRO-2 with accumulation, FSDP, tp + SP, pp (a micro-batch holds windows
#    with boundaries inside; interleaved: a chunk of blocks alone), cp 2 (chunks of 4 tokens: boundaries inside
#    chunks, and chunk pairs no sample spans, which the ring skips) and bf16,
#    with the tolerances of parallel_equivalence.sh and parallel_bf16.sh. The
#    loss is the mean over the global batch's masked-in targets: a mean of
#    micro-batch or rank means would differ under accumulation and dp (their
#    target counts differ). More layouts with DTRUN_TEST_FULL=1;
#  - the document mask against PyTorch: `dtrun eval` of a Hugging Face Llama
#    and GPT-2 (written by test/helpers/hf_llama.py, hf_gpt2.py) on an SFT set
#    reports the masked-token mean of every sample run alone in PyTorch
#    (test/helpers/sft_torch.py), within 1e-5 relative, on one process and
#    under tp 2 x pp 2; the same samples packed without the mask give another
#    loss (the check can fail);
#  - bad inputs: one line and the documented exit status (a sample longer
#    than seq_len under the default data.long_samples: refuse, 3; a corrupt
#    mask, 3; data.kind sft with naive attention, with a vit, with
#    train.cuda_graphs: 2).
# Needs Debian's torch (/usr/bin/python3) for the PyTorch part; skips it
# without.
source "$(dirname "$0")/../parallel/lib.bash"
SFT=$T/sft_train.bin
python3 "$ROOT/test/helpers/sft_torch.py" write "$SFT" --samples 400 --vocab 64 --min-len 1 --max-len 24 \
  --no-targets 5 --seed 1 || fail "writing the SFT shard"

# the templates' @SFT@ is this run's shard
eval "orig_$(declare -f layout_job)"
layout_job() { orig_layout_job "$@" && sed -i -e "s|@SFT@|$SFT|" "$3"; }

# the packing puts sample boundaries inside cp 2's chunks of 4 tokens and
# leaves chunk pairs that share no sample (what the two claims need)
python3 - "$SFT" <<'EOF' || fail "the shard does not give the boundaries the test needs"
import struct, sys
blob = open(sys.argv[1], "rb").read()
n, s = struct.unpack("<2i", blob[8:16])
st = struct.unpack("<%dq" % (s + 1), blob[1024 + 3 * n:1024 + 3 * n + 8 * (s + 1)])
lens = [min(b - a, 16) for a, b in zip(st, st[1:])]
wins, cur, used = [], None, 16
for L in lens:
    if used + L > 16:
        cur = []; wins.append(cur); used = 0
    cur.append(L); used += L
inside = apart = 0
for w in wins:
    seg = [i for i, L in enumerate(w) for _ in range(L)]
    seg += [len(w)] * (16 - len(seg))  # the padding: one more segment
    inside += sum(1 for t in range(1, 16) if t % 4 and seg[t] != seg[t - 1])
    # chunk kc before chunk qc shares no sample: the ring skips the pair
    apart += sum(1 for qc in range(4) for kc in range(qc) if seg[4 * kc + 3] != seg[4 * qc])
assert inside > 0 and apart > 0, (inside, apart)
print(f"ok: {len(wins)} windows of 16 from {s} samples; {inside} boundaries inside a cp chunk, "
      f"{apart} chunk pairs sharing no sample")
EOF

# interleaved: a pipeline chunk with neither the embedding nor the head still
# takes its samples' positions and segments from the batch
FP32=("dp=2" "dp=2 mode=zero2 accum=2" "dp=2 mode=fsdp" "tp=2 sp=1" "pp=2 sched=1f1b" "pp=2 sched=interleaved" "cp=2")
BF16=("dp=2 prec=bf16")
GPT=("cp=2" "tp=2 sp=1" "pp=2 sched=gpipe")
if [ "${DTRUN_TEST_FULL:-0}" = 1 ]; then
  FP32+=("dp=2 mode=zero1" "dp=4 mode=hsdp nodes=2" "tp=2" "dp=2 tp=2 mode=fsdp" "pp=2 sched=zb-h1" "cp=2 tp=2" "dp=2 cp=2 mode=zero2" "dp=2 mode=fsdp recompute=block"
    "pp=2 sched=1f1b tp=2 recompute=selective" "dp=2 tp=2 pp=2 sched=1f1b" "dp=2 offload=3 recompute=block")
  BF16+=("tp=2 sp=1 prec=bf16" "pp=2 sched=1f1b prec=bf16" "cp=2 prec=bf16" "dp=2 mode=fsdp prec=bf16")
  GPT+=("dp=2 mode=zero2 accum=2" "cp=2 tp=2" "pp=2 sched=1f1b dp=2")
fi
for lay in "${FP32[@]}"; do run_layout sft-llama "$lay"; done
for lay in "${GPT[@]}"; do run_layout sft-gpt "$lay"; done
FP32_FAILS=$FAILS
LOSS_RTOL=1e-3 PARAM_ATOL=1.6e-2
for lay in "${BF16[@]}"; do run_layout sft-llama "$lay"; done
LOSS_RTOL=1e-5 PARAM_ATOL=1e-4
summary
[ $FAILS -eq 0 ] || fail "$FAILS SFT layouts differ from one process ($FP32_FAILS in fp32)"

# the loss is the global masked mean: one process's first step by hand
python3 - "$T/ref-sft-llama-2.jsonl" <<'EOF' || fail "metrics"
import json, math, sys
l = [json.loads(x) for x in open(sys.argv[1]) if '"loss"' in x]
assert l and all(math.isfinite(x["loss"]) for x in l), l[:2]
assert l[-1]["loss"] < l[0]["loss"], "the SFT loss does not fall"
print(f"ok: the one-process SFT loss falls: {l[0]['loss']:.4f} -> {l[-1]['loss']:.4f}")
EOF

# bad inputs
job=$T/bad.yaml
layout_job sft-llama "" "$job" "$T/bad.jsonl"
sed -e 's/^  long_samples: truncate/  long_samples: refuse/' "$job" >"$T/refuse.yaml"
"$DTRUN" worker "$T/refuse.yaml" >/dev/null 2>"$T/err"; rc=$?
[ $rc = 3 ] && [ "$(grep -c . "$T/err")" = 1 ] && grep -q "sample [0-9]* has [0-9]* tokens, more than model.seq_len 16" "$T/err" ||
  { cat "$T/err"; fail "a sample longer than seq_len under refuse: exit $rc"; }
echo "ok: refused in one line (exit 3): $(cat "$T/err")"
python3 - "$SFT" "$T/corrupt.bin" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<i", b[8:12])[0]
b[1024 + 2 * n + 3] = 7  # a mask byte that is neither 0 nor 1
open(sys.argv[2], "wb").write(b)
EOF
sed -e "s|$SFT|$T/corrupt.bin|" "$job" >"$T/corrupt.yaml"
one_line_exit 3 "a corrupt mask byte" worker "$T/corrupt.yaml"
sed -e 's/^  n_layer: .*/&\n  attention: naive/' "$job" >"$T/naive.yaml"
one_line_exit 2 "data.kind sft with naive attention" --dry-run "$T/naive.yaml"
printf 'model:\n  kind: vit\ndata:\n  kind: sft\n  train: %s\n' "$SFT" >"$T/vit.yaml"
one_line_exit 2 "data.kind sft with a vit" --dry-run "$T/vit.yaml"
sed -e 's/^  global_batch: .*/&\n  cuda_graphs: true/' "$job" >"$T/graphs.yaml"
one_line_exit 2 "data.kind sft with train.cuda_graphs" --dry-run "$T/graphs.yaml"

# the document mask against PyTorch (each sample alone)
# LL, G2, ST ARGS: hf_llama.py, hf_gpt2.py, sft_torch.py ARGS (one PyTorch start-up each)
source "$ROOT/test/helpers/torch_serve.bash"
if ! torch_serve_start LL "$ROOT/test/helpers/hf_llama.py"; then
  echo "skip: the PyTorch comparison"
  exit 0
fi
torch_serve_start G2 "$ROOT/test/helpers/hf_gpt2.py" || exit 1
torch_serve_start ST "$ROOT/test/helpers/sft_torch.py" || exit 1
EVAL=$T/sft_eval.bin
python3 "$ROOT/test/helpers/sft_torch.py" write "$EVAL" --samples 60 --vocab 256 --min-len 1 --max-len 32 \
  --no-targets 2 --seed 5 || fail "writing the eval shard"
LL make "$T/hf-llama" --positions 64 || fail "hf_llama.py make"
G2 make "$T/hf-gpt2" --n-positions 64 || fail "hf_gpt2.py make"
rel_ok() { # A B WHAT: |A - B| / |B| <= 1e-5
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); r=abs(a-b)/abs(b); print(f"rel {r:.2e}"); sys.exit(r>1e-5)' \
    "$1" "$2" >"$T/rel" || fail "$3: dtrun's loss $1 is not PyTorch's $2 ($(cat "$T/rel"))"
  echo "ok: $3: dtrun $1, PyTorch $2 ($(cat "$T/rel"))"
}
for m in llama gpt2; do
  torch=$(ST loss "$T/hf-$m" "$EVAL" --seq-len 32) || fail "PyTorch's loss ($m)"
  nomask=$(ST loss "$T/hf-$m" "$EVAL" --seq-len 32 --packed-no-mask) ||
    fail "PyTorch's packed loss ($m)"
  # ten times the tolerance below at least: the comparison tells the two apart
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b)/b < 1e-4)' "$torch" "$nomask" ||
    fail "$m: packing without the document mask gives PyTorch's loss ($nomask vs $torch): the test could not fail"
  for lay in "" "--tp 2 --pp 2"; do
    # shellcheck disable=SC2086
    "$DTRUN" eval "$T/hf-$m" --data "$EVAL" --seq-len 32 $lay >"$T/eval.out" 2>"$T/eval.err" ||
      { cat "$T/eval.err"; fail "dtrun eval ($m${lay:+ $lay}) of the SFT set"; }
    grep -q "masked-in targets" "$T/eval.out" || { cat "$T/eval.out"; fail "eval does not say it took the masked mean"; }
    loss=$(sed -n 's/.*loss \([0-9.]*\).*/\1/p' "$T/eval.out" | head -1)
    rel_ok "$loss" "$torch" "dtrun eval of a $m on packed samples${lay:+ ($lay)} = each sample alone in PyTorch"
  done
  echo "ok: $m: without the document mask the packed loss would be $nomask (each sample alone: $torch)"
done
torch_serve_stop
echo "ok: data.kind sft: every layout reproduces one process; the document mask is PyTorch's samples alone"
