#!/usr/bin/env bash
# `dtrun tokenize` on instruction data (prompt/completion, chat messages,
# ShareGPT conversations) against Hugging Face: every sample's token ids,
# loss mask and boundaries in dtrun's SFT shards equal what Hugging Face's
# own libraries give (test/helpers/hf_chat_peer.js: @huggingface/jinja 0.5.11
# renders the tokenizer folder's Jinja chat template as transformers.js's
# apply_chat_template does, npm `tokenizers` 0.23.2 encodes it, the mask from
# its offsets), for each template dtrun recognises: Meta-Llama-3-8B-Instruct's,
# Meta-Llama-3-8B's (it ends with the assistant's header), Llama-3.1-8B-
# Instruct's, Qwen2.5's, Qwen2's, SmolLM's, SmolLM2's (the last four on
# Qwen2.5's tokenizer, NFC included; Llama 3.1's on Llama 3's); --chat-template
# over the folder's; prompt/completion without a template (GPT-2's and Llama
# 3's tokenizer.json, the built-in GPT-2: the post-processor's tokens, then
# eos_token or <|endoftext|>). The data: test/helpers/sft_cases.py
# (scripts/data/sft-corpus.sh's fortunes and hard cases). Also: the SFT shard
# layout (header, sizes, starts, masks), samples never straddling shards,
# the validation split by whole samples, the same bytes under 1 and 3
# threads, the summary line's counts; the refusals (one line, exit 2 or 3);
# scripts/data/sft-corpus.sh (deterministic, its shards well formed).
# About half the cases under make test (Llama 3 Instruct's and Qwen2.5's on
# all of them, the other templates on 80 conversations and the hard cases);
# DTRUN_TEST_FULL=1: all cases for every template. KEEP=1 keeps the files.
# Skips (77) without node or npm's registry.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${DTRUN_BIN:-bin/dtrun}
if [ ! -x "$bin" ]; then echo "$bin is not built (make all)"; exit 77; fi
command -v node >/dev/null || { echo "skip: node is not installed (the peer runs under node)"; exit 77; }
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
T=$(mktemp -d /tmp/sft-tokenize.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
npm_dir=$(scripts/data/hf-tokenizers-npm.sh 2>"$T/npm.err") ||
  { cat "$T/npm.err"; echo "skip: the npm packages could not be fetched (above)"; exit 77; }
PEER=$npm_dir/tokenizers JINJA=$npm_dir/jinja

# the data
DTRUN=$bin scripts/data/sft-corpus.sh "$T/sft" >"$T/corpus.log" 2>&1 || { cat "$T/corpus.log"; fail "sft-corpus.sh"; }
SFT_SHARDS=0 scripts/data/sft-corpus.sh "$T/sft2" >/dev/null && cmp -s "$T/sft/fortunes_pc.jsonl" "$T/sft2/fortunes_pc.jsonl" &&
  cmp -s "$T/sft/fortunes_chat.jsonl" "$T/sft2/fortunes_chat.jsonl" || fail "sft-corpus.sh is not deterministic"
[ ! -e "$T/sft2/fortunes_train_000000.bin" ] || fail "SFT_SHARDS=0 wrote shards"
grep -q "no chat template: prompt + completion, then <|endoftext|>" "$T/corpus.log" &&
  [ -s "$T/sft/fortunes_train_000000.bin" ] && [ -s "$T/sft/fortunes_val_000000.bin" ] ||
  { cat "$T/corpus.log"; fail "sft-corpus.sh's shards (GPT-2, prompt/completion)"; }
echo "ok: $(head -1 "$T/corpus.log"), the same twice; its SFT shards for configs/sft-tiny.yaml"
python3 test/helpers/tokenizer_corpus.py "$T/docs.jsonl" 400 >/dev/null || fail "tokenizer_corpus.py"
mkdir -p "$T/d"
# make test: about half the cases, and the templates that share a tokenizer
# with another on chat_small.jsonl; DTRUN_TEST_FULL=1: all of them everywhere
full=; [ "${DTRUN_TEST_FULL:-0}" = 1 ] && full=full
python3 test/helpers/sft_cases.py "$T/docs.jsonl" "$T/sft" "$T/d" $full || fail "sft_cases.py"

# tokenizer folders: the npm packages' and ones with the other known templates
fold() { # NAME TOKENIZER_DIR TEMPLATE_NAME: a folder with the tokenizer and that template of chat_templates.json
  mkdir -p "$T/tok/$1"
  ln -s "$(realpath "$2/tokenizer.json")" "$T/tok/$1/tokenizer.json"
  python3 - "$2/tokenizer_config.json" "$T/tok/$1/tokenizer_config.json" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1], encoding="utf-8"))
c["chat_template"] = json.load(open("test/helpers/chat_templates.json", encoding="utf-8"))[sys.argv[3]]
json.dump(c, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
}
M=$npm_dir
fold qwen2 "$M/qwen2_5/models" qwen2
fold smollm2 "$M/qwen2_5/models" smollm2
fold chatml "$M/qwen2_5/models" chatml
fold llama31 "$M/llama3_1/models" llama3.1

# sft_stream PREFIX SPLIT OUT: the shards of a split checked (layout, sizes,
# starts, masks, no sample across shards) and joined: OUT.ids (uint32),
# OUT.mask, OUT.starts, as the peer writes them
sft_stream() {
  python3 - "$1" "$2" "$3" <<'PY'
import glob, struct, sys
prefix, split, out = sys.argv[1:4]
ids, mask, starts = [], bytearray(), []
paths = sorted(glob.glob(f"{prefix}_{split}_*.bin"))
assert paths, f"no {split} shards"
for path in paths:
    d = open(path, "rb").read()
    h = struct.unpack("<256i", d[:1024])
    magic, version, n, s, w = h[:5]
    assert (magic, version) == (20261128, 1), f"{path}: magic {magic} version {version}"
    assert w in (2, 4) and not any(h[5:]), f"{path}: header {h[:8]}"
    assert len(d) == 1024 + n * w + n + (s + 1) * 8, f"{path}: {len(d)} bytes for {n} tokens, {s} samples"
    t = struct.unpack(f"<{n}{'H' if w == 2 else 'I'}", d[1024:1024 + n * w])
    m = d[1024 + n * w:1024 + n * w + n]
    st = struct.unpack(f"<{s + 1}q", d[1024 + n * w + n:])
    assert st[0] == 0 and st[-1] == n and all(a < b for a, b in zip(st, st[1:])), f"{path}: starts {st[:5]}..."
    assert set(m) <= {0, 1} and all(m[a] == 0 for a in st[:-1]), f"{path}: mask"
    starts += [len(ids) + a for a in st[:-1]]
    ids += t
    mask += m
starts.append(len(ids))
open(out + ".ids", "wb").write(struct.pack(f"<{len(ids)}I", *ids))
open(out + ".mask", "wb").write(bytes(mask))
open(out + ".starts", "w").write("".join(f"{a}\n" for a in starts))
print(len(paths), len(starts) - 1, len(ids), sum(mask))
PY
}
counts=$(sft_stream "$T/sft/fortunes" train "$T/corpus") || fail "sft-corpus.sh's train shards"
read -r _ cs ci cm <<<"$counts"
echo "ok: sft-corpus.sh's train shards: $cs samples, $ci tokens, $cm in the loss; layout checked"
# same NAME TOKENIZER TEMPLATE EOT FILES... [-- DTRUN_FLAGS...]: dtrun's shards
# now (its summary in $T/log), the peer's job for same_check: one node start
# for every comparison
jobs=0 job_name=() job_counts=()
same() {
  local name=$1 tok=$2 tmpl=$3 eot=$4; shift 4
  local files=() flags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do files+=("$1"); shift; done
  [ $# -gt 0 ] && shift && flags=("$@")
  local cfg=$tok/tokenizer_config.json targ=()
  [ -d "$tok" ] || cfg=$(dirname "$tok")/tokenizer_config.json
  [ "$tok" = builtin ] || targ=(--tokenizer "$tok")
  rm -rf "$T/out"
  "$bin" tokenize "${targ[@]}" "${flags[@]}" --val-fraction 0 --threads 2 -o "$T/out/s" "${files[@]}" 2>"$T/log" ||
    { cat "$T/log"; fail "$name: tokenize exited $?"; }
  local counts
  counts=$(sft_stream "$T/out/s" train "$T/j$jobs.dtrun") || { cat "$T/log"; fail "$name: the shards"; }
  local ptok=$tok
  [ "$tok" = builtin ] && ptok=$M/gpt2/models/tokenizer.json && cfg=$M/gpt2/models/tokenizer_config.json
  [ -d "$ptok" ] && ptok=$ptok/tokenizer.json
  (IFS=$'\t'; echo "$ptok"$'\t'"$cfg"$'\t'"$tmpl"$'\t'"$eot"$'\t'"$T/j$jobs.peer"$'\t'"${files[*]}") >>"$T/jobs"
  job_name[$jobs]=$name job_counts[$jobs]=$counts
  jobs=$((jobs + 1))
}
# every job's ids, masks and starts: dtrun's = the peer's
same_check() {
  node test/helpers/hf_chat_peer.js "$PEER" "$JINJA" --jobs "$T/jobs" || fail "the peer"
  local j part
  for ((j = 0; j < jobs; j++)); do
    for part in ids mask starts; do
      cmp -s "$T/j$j.dtrun.$part" "$T/j$j.peer.$part" || {
        python3 - "$T/j$j.dtrun" "$T/j$j.peer" "$part" <<'PY'
import struct, sys
a, b, part = sys.argv[1:4]
def load(p):
    d = open(f"{p}.{part}", "rb").read()
    return list(struct.unpack(f"<{len(d)//4}I", d)) if part == "ids" else list(d) if part == "mask" else d.split()
x, y = load(a), load(b)
k = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
print(f"{part}: dtrun has {len(x)}, the peer {len(y)}; first difference at {k}: {x[max(0,k-4):k+6]} vs {y[max(0,k-4):k+6]}")
PY
        fail "${job_name[$j]}: dtrun's $part differ from Hugging Face's"
      }
    done
    read -r _ samples ids masked <<<"${job_counts[$j]}"
    echo "ok: ${job_name[$j]}: $samples samples, $ids ids, $masked in the loss: ids, masks and starts identical to Hugging Face's"
  done
}
D=$T/d
same "Meta-Llama-3-8B-Instruct's template (llama3)" "$M/llama3_1/models" config "<|eot_id|>" "$D/chat.jsonl" "$D/conv.jsonl" "$D/pc.jsonl"
grep -q "chat template llama3 (Meta-Llama-3-8B-Instruct's, recognised in $M/llama3_1/models/tokenizer_config.json)" "$T/log" ||
  { cat "$T/log"; fail "the summary names the template and where it was found"; }
grep -qE "3 files \(1 messages, 1 conversations, 1 prompt/completion\)|3 files \(1 prompt/completion, 1 messages, 1 conversations\)" "$T/log" ||
  { cat "$T/log"; fail "the summary names the files' kinds"; }
S=$D/chat_small.jsonl
[ -n "$full" ] && S=$D/chat.jsonl
same "Meta-Llama-3-8B's template (always the assistant's header last)" "$M/llama3/models" config "<|eot_id|>" "$S" "$D/pc.jsonl"
same "Llama-3.1-8B-Instruct's template (llama3.1)" "$T/tok/llama31" config "<|eot_id|>" "$S" "$D/conv.jsonl"
same "Qwen2.5-Instruct's template (qwen2.5; NFC)" "$M/qwen2_5/models" config "<|im_end|>" "$D/chat.jsonl" "$D/conv.jsonl" "$D/pc.jsonl"
same "Qwen2-Instruct's template (qwen2)" "$T/tok/qwen2" config "<|im_end|>" "$S"
same "SmolLM2-Instruct's template (smollm2)" "$T/tok/smollm2" config "<|im_end|>" "$S"
same "SmolLM-Instruct's template (chatml)" "$T/tok/chatml" config "<|im_end|>" "$S" "$D/conv.jsonl"
python3 -c 'import json; print(json.load(open("test/helpers/chat_templates.json"))["chatml"], end="")' >"$T/chatml.jinja"
same "--chat-template chatml over Qwen2.5's own" "$M/qwen2_5/models" "$T/chatml.jinja" "<|im_end|>" "$S" -- --chat-template chatml
grep -q "chat template chatml (--chat-template)" "$T/log" || { cat "$T/log"; fail "the summary says --chat-template"; }
same "prompt/completion, no template: GPT-2's tokenizer.json (<|endoftext|> after)" "$M/gpt2/models" none "" "$D/pc.jsonl"
grep -q "no chat template: prompt + completion, then <|endoftext|>" "$T/log" || { cat "$T/log"; fail "the summary says how"; }
# the built-in GPT-2 matches no special token in text (OpenAI's encoder.py), the tokenizer.json does
grep -vF '<|endoftext|>' "$D/pc.jsonl" >"$D/pc_plain.jsonl"
same "prompt/completion, built-in GPT-2 (samples without <|endoftext|> text)" builtin none "" "$D/pc_plain.jsonl"
same "prompt/completion, --chat-template none: Meta-Llama-3-8B (eos_token <|end_of_text|>)" "$M/llama3/models" none "" "$D/pc.jsonl" -- --chat-template none
same "prompt/completion, --chat-template none: Llama 3.1's post-processor (<|begin_of_text|>, eos_token <|eot_id|>)" \
  "$M/llama3_1/models" none "" "$D/pc.jsonl" -- --chat-template none
same_check

# the summary's counts, the split, threads and shard sizes
F=$D/chat.jsonl
"$bin" tokenize --tokenizer "$M/qwen2_5/models" --val-fraction 0 --threads 1 -o "$T/one/s" "$F" "$D/pc.jsonl" 2>"$T/log1" ||
  { cat "$T/log1"; fail "1 thread"; }
"$bin" tokenize --tokenizer "$M/qwen2_5/models" --val-fraction 0 --threads 3 --shard-tokens 5000 -o "$T/three/s" "$F" "$D/pc.jsonl" \
  2>"$T/log3" || { cat "$T/log3"; fail "3 threads"; }
read -r n1 s1 i1 m1 <<<"$(sft_stream "$T/one/s" train "$T/one")"
read -r n3 s3 i3 m3 <<<"$(sft_stream "$T/three/s" train "$T/three")"
for part in ids mask starts; do cmp -s "$T/one.$part" "$T/three.$part" || fail "3 threads and 5000-token shards: other $part"; done
[ "$n1" -eq 1 ] && [ "$n3" -gt 3 ] || fail "$n1 and $n3 shards"
python3 - "$T/three/s" 5000 <<'PY' || fail "a shard holds more than --shard-tokens without a sample that long"
import glob, struct, sys
for p in sorted(glob.glob(sys.argv[1] + "_train_*.bin")):
    h = struct.unpack("<5i", open(p, "rb").read(20))
    assert h[2] <= int(sys.argv[2]) or h[3] == 1, (p, h)
PY
longest=$(python3 -c 'import sys; s=[int(x) for x in open(sys.argv[1])]; print(max(b-a for a,b in zip(s,s[1:])))' "$T/one.starts")
grep -q "$s1 samples (0 val) -> $i1 train tokens" "$T/log1" && grep -q "; $m1 tokens in the loss (" "$T/log1" &&
  grep -q "longest sample $longest tokens" "$T/log1" || { cat "$T/log1"; fail "the summary's counts ($s1 samples, $i1 tokens, $m1 in the loss, longest $longest)"; }
echo "ok: 1 thread = 3 threads with 5000-token shards ($n3 shards, none across a sample); the summary counts $s1 samples, $i1 tokens, $m1 in the loss, the longest $longest"
"$bin" tokenize --tokenizer "$M/qwen2_5/models" --val-fraction 0.25 --shard-tokens 1000 -o "$T/split/s" "$F" 2>"$T/log" ||
  { cat "$T/log"; fail "split"; }
n=$(grep -c . "$F"); k=$(( (n + 2) / 4 ))
read -r _ st _ _ <<<"$(sft_stream "$T/split/s" train "$T/tr")"
read -r _ sv _ _ <<<"$(sft_stream "$T/split/s" val "$T/va")"
grep -q "$n samples ($sv val)" "$T/log" && [ $((st + sv)) -eq "$n" ] && [ "$sv" -eq $(( (n * 25 + 50) / 100 )) ] ||
  { cat "$T/log"; fail "val: $sv of $n samples, train $st"; }
python3 - "$T" <<'PY' || fail "the split does not take whole samples evenly spaced"
import struct, sys
t = sys.argv[1]
def samples(p):
    ids = struct.unpack(f"<{len(open(p + '.ids','rb').read())//4}I", open(p + ".ids", "rb").read())
    m = open(p + ".mask", "rb").read()
    s = [int(x) for x in open(p + ".starts")]
    return [(ids[a:b], m[a:b]) for a, b in zip(s, s[1:])]
whole = samples(f"{t}/one")[:len(samples(f"{t}/tr")) + len(samples(f"{t}/va"))]
tr, va = samples(f"{t}/tr"), samples(f"{t}/va")
n, k = len(whole), len(va)
want_val = [g for g in range(n) if (g + 1) * k // n > g * k // n]
assert [whole[g] for g in want_val] == va, "val samples"
assert [whole[g] for g in range(n) if g not in set(want_val)] == tr, "train samples"
PY
echo "ok: --val-fraction 0.25: $sv of $n samples to val, whole and evenly spaced; train the rest, in order"

# refusals: one line, exit 2 (flags, templates) or 3 (data)
expect() { # STATUS TEXT ARGS...
  local want=$1 what=$2; shift 2
  "$bin" "$@" >"$T/out.txt" 2>"$T/err"; local rc=$?
  [ "$rc" -eq "$want" ] || { cat "$T/err"; fail "$*: exit $rc, want $want"; }
  [ "$(wc -l <"$T/err")" -eq 1 ] || { cat "$T/err"; fail "$*: not one line"; }
  grep -qF -- "$what" "$T/err" || { cat "$T/err"; fail "$*: no '$what'"; }
  echo "ok: exit $rc: $(cat "$T/err")"
}
B=$T/bad
mkdir -p "$B"
printf '%s\n' '{"prompt": "a", "completion": "b"}' '{"text": "no instruction fields"}' >"$B/nofields.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]}' >"$B/role.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": "a"}]}' '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}' >"$B/content.jsonl"
printf '%s\n' '{"prompt": "a", "completion": "b"}' '{"prompt": "a", "completion": "b"' >"$B/json.jsonl"
printf '%s\n' '{"prompt": "a"}' >"$B/nocompletion.jsonl"
printf '%s\n' '{"conversations": [{"from": "human", "value": "a"}, {"from": "robot", "value": "b"}]}' >"$B/from.jsonl"
printf '%s\n' '{"messages": []}' >"$B/empty.jsonl"
printf '%s\n' '{"prompt": "e", "completion": "\u0301 an accent that NFC joins to the prompt"}' >"$B/nfc.jsonl"
printf 'plain text\n' >"$B/text.txt"
mkdir -p "$B/weird"
cp "$M/qwen2_5/models/tokenizer.json" "$B/weird/"
echo '{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}", "eos_token": "<|im_end|>"}' >"$B/weird/tokenizer_config.json"
Q=$M/qwen2_5/models
expect 3 "$B/nofields.jsonl:2: no 'prompt'/'completion', 'messages' or 'conversations' field" tokenize --tokenizer "$Q" -o "$B/o/x" "$B/nofields.jsonl"
expect 3 "$B/role.jsonl:1: messages[1].role 'tool' is not system, user or assistant" tokenize --tokenizer "$Q" -o "$B/o/x" "$B/role.jsonl"
expect 3 "$B/content.jsonl:2: messages[0].content is a list, not a string" tokenize --tokenizer "$Q" -o "$B/o/x" "$B/content.jsonl"
expect 3 "$B/json.jsonl:2: not valid JSON" tokenize --tokenizer "$Q" -o "$B/o/x" "$B/json.jsonl"
expect 3 "$B/nocompletion.jsonl:1: a 'prompt' without a 'completion'" tokenize --tokenizer "$Q" -o "$B/o/x" "$B/nocompletion.jsonl"
expect 3 "$B/from.jsonl:1: conversations[1].from 'robot' is not system, human or gpt" tokenize --tokenizer "$Q" -o "$B/o/x" "$B/from.jsonl"
expect 3 "$B/empty.jsonl:1: messages is an empty list" tokenize --tokenizer "$Q" -o "$B/o/x" "$B/empty.jsonl"
expect 3 "$B/nfc.jsonl:1: the tokenizer's normalizer changes the text where the loss mask starts or ends" tokenize --tokenizer "$Q" --chat-template none -o "$B/o/x" "$B/nfc.jsonl"
expect 3 "$B/nofields.jsonl:1: no 'messages' (or 'conversations') field (--format messages)" tokenize --tokenizer "$Q" --format messages -o "$B/o/x" "$B/nofields.jsonl"
expect 2 "--chat-template 'chatlm': not a template dtrun knows; did you mean 'chatml'?" tokenize --tokenizer "$Q" --chat-template chatlm -o "$B/o/x" "$F"
expect 2 "--format 'mesages': want auto, text, prompt-completion or messages; did you mean 'messages'?" tokenize --format mesages -o "$B/o/x" "$F"
expect 2 "$B/weird/tokenizer_config.json: chat_template (" tokenize --tokenizer "$B/weird" -o "$B/o/x" "$F"
grep -qF "ChatML-like: <|im_start|>, hash " "$T/err" || fail "the unknown template's line says what it looks like"
expect 2 "chat messages need a chat template, and GPT-2's built-in tokenizer has none; give --chat-template NAME" tokenize -o "$B/o/x" "$F"
expect 2 "chat template chatml: GPT-2 (built in) has no added token <|im_start|>" tokenize --chat-template chatml -o "$B/o/x" "$F"
expect 2 "holds instruction data (its first object has messages) and $B/text.txt text" tokenize --tokenizer "$Q" -o "$B/o/x" "$F" "$B/text.txt"
expect 2 "$B/text.txt: --format messages reads JSONL" tokenize --tokenizer "$Q" --format messages -o "$B/o/x" "$B/text.txt"
[ ! -e "$B/o" ] || { ls -R "$B/o"; fail "a refused run left shards behind"; }
# a refused template still lets plain text through (the template is read for instruction data only)
"$bin" tokenize --tokenizer "$B/weird" --val-fraction 0 -o "$B/t/x" "$B/text.txt" 2>"$T/err" || { cat "$T/err"; fail "text with an unknown template"; }
echo "ok: plain text with a tokenizer whose template dtrun does not know: llm.c shards as before"
echo "PASS"
