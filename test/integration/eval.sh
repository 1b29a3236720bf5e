#!/usr/bin/env bash
# dtrun eval: the loss of a GPT-2 made in PyTorch (test/helpers/hf_gpt2.py)
# over a byte-level text file equals PyTorch's on the same windows within
# 1e-5 relative, under dp1, tp2, pp2 and fsdp2; perplexity = exp(loss); a
# checkpoint evaluates the same as its `dtrun export` folder; bad input is one
# line and a documented status. Skips (77) without Debian's torch.
source "$(dirname "$0")/../parallel/lib.bash"
PY=/usr/bin/python3
"$PY" -c 'import torch' 2>/dev/null || { echo "skip: /usr/bin/python3 cannot import torch (python3-torch is a test-only peer)"; exit 77; }
HF=$T/hf-gpt2
"$PY" "$ROOT/test/helpers/hf_gpt2.py" make "$HF" || fail "hf_gpt2.py make"
head -c 6000 "$ROOT/README.md" >"$T/text"
want=$("$PY" "$ROOT/test/helpers/hf_gpt2.py" loss-file "$HF" "$T/text" --seq-len 64) || fail "pytorch loss"
for lay in "" "--tp 2" "--pp 2" "--dp 2 --mode fsdp"; do
  # shellcheck disable=SC2086
  out=$("$DTRUN" eval "$HF" --data "$T/text" $lay 2>"$T/err" | sed 's/^\[default\/0\]://') || { cat "$T/err"; fail "eval $lay"; }
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

expect() { one_line_exit "$1" "$2" eval "${@:3}"; } # STATUS WHAT ARGS...
expect 2 "no --data" "$HF"
expect 3 "a missing data file" "$HF" --data "$T/none"
expect 6 "a missing model" "$T/none" --data "$T/text"
expect 2 "a bad option" "$HF" --data "$T/text" --tp x
