#!/usr/bin/env bash
# dtrun generate: with temperature 0 the KV-cache decoding of a GPT-2 made in
# PyTorch (test/helpers/hf_gpt2.py) gives PyTorch's greedy tokens (whole
# prefix recomputed each step) for 50 tokens, on one process and under tp 2;
# sampling is deterministic under a seed and the same on tp 2; bad input is
# one line and a documented exit status. Skips (77) without Debian's torch.
source "$(dirname "$0")/../parallel/lib.bash"
PY=/usr/bin/python3
source "$ROOT/test/helpers/torch_serve.bash"
torch_serve_start G2 "$ROOT/test/helpers/hf_gpt2.py" || exit 77  # G2 ARGS: hf_gpt2.py ARGS, one PyTorch start-up for all
HF=$T/hf-gpt2
G2 make "$HF" || fail "hf_gpt2.py make"
torch_ids=$(G2 greedy "$HF" --prompt-ids 1,2,3 --n 50 2>"$T/margin") || fail "pytorch greedy"
# rank 0's results come as on one process under --tp (no "[default/0]:"), so
# the output is compared as it is
gen() { "$DTRUN" generate "$@" --no-echo 2>>"$T/gen.err" | head -1; }

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
txt=$("$DTRUN" generate "$HF" --prompt "Hi" --max-new-tokens 5 --temperature 0 --no-echo 2>/dev/null | od -An -tu1 | tr -s ' \n' ' ')
want=$(G2 greedy "$HF" --prompt-ids 72,105 --n 5 2>/dev/null | tr ',' ' ')
[ "$txt" = " $want 10 " ] || fail "byte-level text: got bytes '$txt', want '$want' and a newline"
echo "ok: --prompt text on a byte-level model streams bytes"
# the prompt is echoed by default (issue 25 item 6): text, then ids
echoed=$("$DTRUN" generate "$HF" --prompt "Hi" --max-new-tokens 5 --temperature 0 2>/dev/null | od -An -tu1 | tr -s ' \n' ' ')
[ "$echoed" = " 72 105 $want 10 " ] || fail "echo: got bytes '$echoed', want the prompt's 72 105, then '$want'"
ids_echo=$("$DTRUN" generate "$HF" --prompt-ids 1,2,3 --max-new-tokens 50 --temperature 0 --ids 2>/dev/null | head -1)
[ "$ids_echo" = "1,2,3,$one" ] || fail "echo with --ids: got '$ids_echo', want 1,2,3,<the 50 new ids>"
echo "ok: the prompt is echoed (text and --ids), --no-echo leaves it out"
# --max-new-tokens beyond the positions is clamped with a note (the model has 64)
"$DTRUN" generate "$HF" --prompt-ids 1,2,3 --max-new-tokens 500 --temperature 0 --ids --no-echo >"$T/clamp.out" 2>"$T/clamp.err" ||
  { cat "$T/clamp.err"; fail "a --max-new-tokens past the positions should be clamped, not fail"; }
n_new=$(head -1 "$T/clamp.out" | tr ',' '\n' | grep -c .)
[ "$n_new" = 61 ] && grep -q "max-new-tokens 500 clamped to 61: the prompt's 3 tokens + 61 fill the model's 64 positions" "$T/clamp.err" ||
  { cat "$T/clamp.out" "$T/clamp.err"; fail "clamp: $n_new new tokens, want 61 and the note"; }
echo "ok: --max-new-tokens 500 on a 64-position model: 61 tokens and the note: $(grep clamped "$T/clamp.err")"
# several prompts from a file, each as it would be alone
printf 'Hi\n\nHo there\n' >"$T/prompts.txt"
"$DTRUN" generate "$HF" --prompts "$T/prompts.txt" --max-new-tokens 5 --temperature 0 --no-echo >"$T/multi.out" 2>"$T/multi.err" ||
  { cat "$T/multi.err"; fail "--prompts FILE"; }
a=$("$DTRUN" generate "$HF" --prompt "Hi" --max-new-tokens 5 --temperature 0 --no-echo 2>/dev/null)
b=$("$DTRUN" generate "$HF" --prompt "Ho there" --max-new-tokens 5 --temperature 0 --no-echo 2>/dev/null)
[ "$(cat "$T/multi.out")" = "$(printf '%s\n%s' "$a" "$b")" ] && [ "$(grep -c 'new tokens after' "$T/multi.err")" = 2 ] ||
  { od -c "$T/multi.out" | head; cat "$T/multi.err"; fail "--prompts: two prompts (a blank line skipped) should give what each gives alone"; }
echo "ok: --prompts FILE: two prompts (the blank line skipped), each completion as when alone"

# bad input: one line, documented status
expect() { one_line_exit "$1" "$2" generate "${@:3}"; } # STATUS WHAT ARGS...
expect 6 "a missing source" "$T/nothing" --prompt-ids 1
expect 2 "no prompt" "$HF"
expect 2 "a prompt id past the vocabulary" "$HF" --prompt-ids 1,256
seq64=$(seq -s, 1 64)
expect 2 "a prompt that fills the positions" "$HF" --prompt-ids "$seq64"
expect 2 "a misspelt option (did you mean)" "$HF" --promt x
grep -q "unknown option '--promt'; did you mean '--prompt'?" "$T/err" || { cat "$T/err"; fail "no did-you-mean for --promt"; }
printf '\n \n' >"$T/blank.txt"
expect 2 "a prompts file of blank lines" "$HF" --prompts "$T/blank.txt"
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
# GPT-2's vocabulary: a text prompt goes through lib/text's BPE ("Hello, world!
# It's" is 6 tokens: Hello , world ! It 's) and the new tokens come back as text
cat >"$T/bpe.yaml" <<EOF2
model: {kind: gpt, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 50257, seq_len: 32}
train: {steps: 1, global_batch: 2, threads: 1}
checkpoint: {dir: $T/bpe.ck}
log: {progress: off}
EOF2
"$DTRUN" worker "$T/bpe.yaml" >/dev/null 2>&1 || fail "bpe checkpoint run"
"$DTRUN" generate "$T/bpe.ck" --prompt "Hello, world! It's" --max-new-tokens 3 --temperature 0 --ids --no-echo \
  >"$T/bpe.ids" 2>"$T/bpe.err" || { cat "$T/bpe.err"; fail "generate with a BPE prompt"; }
grep -q "after a 6-token prompt" "$T/bpe.err" || { cat "$T/bpe.err"; fail "the BPE prompt is not 6 tokens"; }
# a checkpoint is a source of weights here, not a run to resume
grep -q "^dtrun: weights from $T/bpe.ck" "$T/bpe.err" && ! grep -q "resuming" "$T/bpe.err" ||
  { cat "$T/bpe.err"; fail "generate from a checkpoint does not say where its weights come from"; }
"$DTRUN" generate "$T/bpe.ck" --prompt "Hello, world! It's" --max-new-tokens 3 --temperature 0 --no-echo \
  >"$T/bpe.txt" 2>/dev/null || fail "generate text with a BPE vocabulary"
python3 - "$T/bpe.ids" "$T/bpe.txt" <<'PY' || fail "the BPE text is not the decoded ids"
import json, sys
# GPT-2's own decoding: encoder.json's strings, mapped back through bytes_to_unicode
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte_of = {chr(c): b for b, c in zip(bs, cs)}
dec = {v: k for k, v in json.load(open("lib/text/gpt2/encoder.json")).items()}
ids = [int(x) for x in open(sys.argv[1]).read().split(",") if x.strip()]
want = b"".join(bytes(byte_of[ch] for ch in dec[i]) for i in ids)
got = open(sys.argv[2], "rb").read().rstrip(b"\n")
assert len(ids) == 3 and got == want, (ids, want, got)
PY
echo "ok: a GPT-2-vocabulary prompt through the BPE: 6 tokens, text back"
torch_serve_stop
echo "PASS generate (bpe)"
