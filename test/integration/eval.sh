#!/usr/bin/env bash
# dtrun eval: the loss of a GPT-2 made in PyTorch (test/helpers/hf_gpt2.py)
# over a byte-level text file equals PyTorch's on the same windows within
# 1e-5 relative, under dp1, tp2, pp2 and fsdp2; perplexity = exp(loss); a
# checkpoint evaluates the same as its `dtrun export` folder; bad input is one
# line and a documented status. Skips (77) without Debian's torch.
source "$(dirname "$0")/../parallel/lib.bash"
PY=/usr/bin/python3
source "$ROOT/test/helpers/torch_serve.bash"
torch_serve_start G2 "$ROOT/test/helpers/hf_gpt2.py" || exit 77  # G2 ARGS: hf_gpt2.py ARGS, one PyTorch start-up for all
HF=$T/hf-gpt2
G2 make "$HF" || fail "hf_gpt2.py make"
head -c 6000 "$ROOT/README.md" >"$T/text"
want=$(G2 loss-file "$HF" "$T/text" --seq-len 64) || fail "pytorch loss"
for lay in "" "--tp 2" "--pp 2" "--dp 2 --mode fsdp"; do
  # shellcheck disable=SC2086
  out=$("$DTRUN" eval "$HF" --data "$T/text" $lay 2>"$T/err") || { cat "$T/err"; fail "eval $lay"; }
  python3 - "$out" "$want" <<'EOF2' || fail "eval ${lay:-dp1}: $out is not PyTorch's loss $want"
import math, re, sys
out, want = sys.argv[1], float(sys.argv[2])
loss = float(re.search(r"loss (\S+)", out).group(1)); ppl = float(re.search(r"perplexity (\S+)", out).group(1))
r = abs(loss - want) / want
assert r <= 1e-5 and abs(ppl - math.exp(loss)) <= 1e-3 * ppl, (r, ppl)
print(f"rel {r:.1e}")
EOF2
  echo "ok: eval ${lay:-(one process)}: $out (PyTorch $want)"
done

# a checkpoint and its exported folder: the same loss
cat >"$T/job.yaml" <<EOF2
model: {init_from: $HF, seq_len: 64}
train: {steps: 2, global_batch: 8, lr: 1.0e-3, threads: 1}
checkpoint: {dir: $T/ck}
log: {progress: off}
EOF2
"$DTRUN" worker "$T/job.yaml" >"$T/train.log" 2>&1 || { cat "$T/train.log"; fail "training 2 steps"; }
"$DTRUN" export "$T/ck" "$T/exported/" 2>/dev/null || fail "export"
a=$("$DTRUN" eval "$T/ck" --data "$T/text" 2>"$T/ck.err"); b=$("$DTRUN" eval "$T/exported" --data "$T/text" 2>/dev/null)
[ -n "$a" ] && [ "${a#* loss }" = "${b#* loss }" ] || fail "checkpoint and export evaluate differently: '$a' vs '$b'"
grep -q "^dtrun: weights from $T/ck" "$T/ck.err" && ! grep -q "resuming" "$T/ck.err" ||
  { cat "$T/ck.err"; fail "eval of a checkpoint does not say where its weights come from"; }
echo "ok: a checkpoint and its exported folder: ${a#* on *: }"

# the whole file by default, whatever --batch (issue 25 item 5): 6000 bytes
# in windows of 64 are 93 windows (5953 tokens) and a tail of 47 the output names
declare -A by_batch
for b in 1 4 32; do
  out=$("$DTRUN" eval "$HF" --data "$T/text" --batch $b 2>"$T/err") || { cat "$T/err"; fail "eval --batch $b"; }
  echo "$out" | grep -q "93 windows of 64 tokens; the last 47 tokens (less than a window) not evaluated" ||
    fail "eval --batch $b does not cover the file's 93 windows and name the 47-token tail: $out"
  by_batch[$b]=$(echo "$out" | sed 's/.* loss \([^ ]*\) .*/\1/')
done
python3 - "${by_batch[1]}" "${by_batch[4]}" "${by_batch[32]}" <<'EOF2' || fail "eval depends on --batch: ${by_batch[*]}"
import sys
l = [float(x) for x in sys.argv[1:]]
assert max(l) - min(l) <= 1e-6 * max(l), l
EOF2
echo "ok: --batch 1, 4, 32 give the same loss over all 93 windows (${by_batch[1]} ${by_batch[4]} ${by_batch[32]})"

# training's val_loss on the same windows: a byte-level GPT trained 6 steps on
# the text with a 20 % validation split, validating on eval_batches 3 of
# global_batch 4; eval of its final checkpoint on --split val, --batches 3
# --batch 4 takes the same 12 windows
cat >"$T/val.yaml" <<EOF2
model: {kind: gpt, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 256, seq_len: 64}
data: {kind: text, train: $T/text, val_fraction: 0.2}
train: {steps: 6, global_batch: 4, micro_batch: 2, lr: 3.0e-3, eval_every: 3, eval_batches: 3, threads: 1}
checkpoint: {dir: $T/val.ck}
log: {progress: off, metrics: $T/val.jsonl}
EOF2
"$DTRUN" worker "$T/val.yaml" >"$T/val.log" 2>&1 || { cat "$T/val.log"; fail "training the validation run"; }
train_val=$(python3 -c "import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if 'val_loss' in r][-1]['val_loss'])" "$T/val.jsonl")
for lay in "" "--dp 2"; do
  # shellcheck disable=SC2086
  out=$("$DTRUN" eval "$T/val.ck" --data "$T/text" --split val --val-fraction 0.2 --batches 3 --batch 4 $lay 2>"$T/err") || { cat "$T/err"; fail "eval --split val $lay"; }
  python3 - "$out" "$train_val" <<'EOF2' || fail "eval --split val ${lay:-}: $out, training's val_loss $train_val"
import re, sys
loss = float(re.search(r"loss (\S+)", sys.argv[1]).group(1)); want = float(sys.argv[2])
assert abs(loss - want) <= 1e-6 + 1e-6 * abs(want), (loss, want)  # the metrics file prints 6 decimals
assert "(validation split, the last 20%)" in sys.argv[1] and "12 windows of 64 tokens of 18" in sys.argv[1], sys.argv[1]
EOF2
  echo "ok: eval --split val --batches 3 --batch 4 ${lay:-(one process)} = training's final val_loss $train_val: $out"
done

expect() { one_line_exit "$1" "$2" eval "${@:3}"; } # STATUS WHAT ARGS...
expect 2 "no --data" "$HF"
expect 3 "a missing data file" "$HF" --data "$T/none"
expect 6 "a missing model" "$T/none" --data "$T/text"
expect 2 "a bad option" "$HF" --data "$T/text" --tp x
expect 2 "a misspelt option" "$HF" --data "$T/text" --batchs 4
grep -q "did you mean '--batch" "$T/err" || fail "no did-you-mean for --batchs"
torch_serve_stop
expect 2 "--val-fraction without --split val" "$HF" --data "$T/text" --val-fraction 0.2
