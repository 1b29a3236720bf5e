#!/usr/bin/env bash
# dtrun generate: with temperature 0 the KV-cache decoding of a GPT-2 made in
# PyTorch (test/helpers/hf_gpt2.py) gives PyTorch's greedy tokens (whole
# prefix recomputed each step) for 50 tokens, on one process and under tp 2;
# sampling is deterministic under a seed and the same on tp 2; bad input is
# one line and a documented exit status. Skips (77) without Debian's torch.
source "$(dirname "$0")/../parallel/lib.bash"
PY=/usr/bin/python3
"$PY" -c 'import torch' 2>/dev/null || { echo "skip: /usr/bin/python3 cannot import torch (python3-torch is a test-only peer)"; exit 77; }
HF=$T/hf-gpt2
"$PY" "$ROOT/test/helpers/hf_gpt2.py" make "$HF" || fail "hf_gpt2.py make"
torch_ids=$("$PY" "$ROOT/test/helpers/hf_gpt2.py" greedy "$HF" --prompt-ids 1,2,3 --n 50 2>"$T/margin") || fail "pytorch greedy"
gen() { "$DTRUN" generate "$@" 2>>"$T/gen.err" | sed 's/^\[default\/0\]://' | head -1; }

one=$(gen "$HF" --prompt-ids 1,2,3 --max-new-tokens 50 --temperature 0 --ids)
[ "$one" = "$torch_ids" ] || { echo "dtrun:   $one"; echo "pytorch: $torch_ids"; cat "$T/gen.err"; fail "greedy tokens differ from PyTorch's"; }
echo "ok: 50 greedy tokens = PyTorch's ($(cat "$T/margin"))"
tp2=$(gen "$HF" --prompt-ids 1,2,3 --max-new-tokens 50 --temperature 0 --ids --tp 2)
[ "$tp2" = "$one" ] || { echo "tp2: $tp2"; cat "$T/gen.err"; fail "tp 2 differs from one process"; }
echo "ok: tp 2 gives the same 50 tokens"

s1=$(gen "$HF" --prompt-ids 5,6 --max-new-tokens 40 --temperature 0.8 --top-k 40 --top-p 0.9 --seed 11 --ids)
s2=$(gen "$HF" --prompt-ids 5,6 --max-new-tokens 40 --temperature 0.8 --top-k 40 --top-p 0.9 --seed 11 --ids --tp 2)
s3=$(gen "$HF" --prompt-ids 5,6 --max-new-tokens 40 --temperature 0.8 --top-k 40 --top-p 0.9 --seed 12 --ids)
[ -n "$s1" ] && [ "$s1" = "$s2" ] || { echo "$s1"; echo "$s2"; fail "sampling under a seed differs on tp 2"; }
[ "$s1" != "$s3" ] || fail "another seed samples the same 40 tokens"
echo "ok: sampling (T 0.8, top-k 40, top-p 0.9) is the same under a seed on tp 1 and 2, another seed differs"

# byte-level text: the prompt's bytes are its tokens, the output bytes
txt=$("$DTRUN" generate "$HF" --prompt "Hi" --max-new-tokens 5 --temperature 0 2>/dev/null | od -An -tu1 | tr -s ' \n' ' ')
want=$("$PY" "$ROOT/test/helpers/hf_gpt2.py" greedy "$HF" --prompt-ids 72,105 --n 5 2>/dev/null | tr ',' ' ')
[ "$txt" = " $want 10 " ] || fail "byte-level text: got bytes '$txt', want '$want' and a newline"
echo "ok: --prompt text on a byte-level model streams bytes"

# bad input: one line, documented status
expect() { # STATUS WHAT ARGS...
  local want=$1 what=$2; shift 2
  "$DTRUN" generate "$@" >/dev/null 2>"$T/err"; local rc=$?
  [ $rc = "$want" ] || { cat "$T/err"; fail "$what: exit $rc, want $want"; }
  [ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err"; fail "$what: not one line"; }
  echo "ok: $what: exit $rc: $(cat "$T/err")"
}
expect 6 "a missing source" "$T/nothing" --prompt-ids 1
expect 2 "no prompt" "$HF"
expect 2 "a prompt id past the vocabulary" "$HF" --prompt-ids 1,256
expect 2 "more tokens than positions" "$HF" --prompt-ids 1 --max-new-tokens 64
cp -r "$HF" "$T/hf-bad" && sed -i 's/"n_embd": 64/"n_embd": 32/' "$T/hf-bad/config.json"
"$DTRUN" generate "$T/hf-bad" --prompt-ids 1 --max-new-tokens 5 >/dev/null 2>"$T/err"; rc=$?
[ $rc = 6 ] && grep -q "is \[256, 64\], the model needs \[256, 32\]" "$T/err" ||
  { cat "$T/err"; fail "wrong shapes: exit $rc, want 6 and a line per tensor"; }
echo "ok: wrong shapes: exit 6, $(grep -c 'the model needs' "$T/err") lines like: $(grep -m1 'the model needs' "$T/err")"
# a ViT checkpoint
cat >"$T/vit.yaml" <<EOF2
model: {kind: vit}
train: {steps: 1, global_batch: 8, threads: 1}
checkpoint: {dir: $T/vit.ck}
log: {progress: off}
EOF2
"$DTRUN" worker "$T/vit.yaml" >/dev/null 2>&1 || fail "vit checkpoint run"
expect 2 "a ViT checkpoint" "$T/vit.ck" --prompt-ids 1 --max-new-tokens 5
