#!/usr/bin/env bash
# `dtrun tokenize`: the test corpus (test/tokenize/corpus: unicode, emoji,
# whitespace runs, contractions, JSONL) gives exactly the reference ids of
# test/tokenize/reference_ids.txt (made by the npm package gpt-3-encoder; the
# command is in its header), each document preceded by <|endoftext|>, in
# llm.c's shard format; the same bytes under 1 and 3 threads and across shard
# sizes; the validation split takes whole documents (one document: its tail);
# the shards train a GPT for a few steps; bad input gets one line and its
# documented exit status (2 flags, 3 input, 1 output).
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${DTRUN_BIN:-bin/dtrun}
if [ ! -x "$bin" ]; then echo "$bin is not built (make all)"; exit 77; fi
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
T=$(mktemp -d /tmp/tokenize.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C=test/tokenize/corpus

# shards PREFIX SPLIT: the ids of every shard of a split, one per line
shards() {
  python3 - "$1" "$2" <<'PY'
import glob, struct, sys
for path in sorted(glob.glob(f"{sys.argv[1]}_{sys.argv[2]}_*.bin")):
    d = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", d[:12])
    assert (magic, version) == (20240520, 1), path
    assert len(d) == 1024 + 2 * n, f"{path}: {len(d)} bytes for {n} tokens"
    for t in struct.unpack(f"<{n}H", d[1024:]):
        print(t)
PY
}
# the reference stream: 50256 then each document's ids, in corpus order
grep -v '^#' test/tokenize/reference_ids.txt | awk '{print 50256; for (i = 2; i <= NF; i++) print $i}' >"$T/ref"
docs=$(grep -vc '^#' test/tokenize/reference_ids.txt)
bytes=$(python3 -c 'import json,sys
n=0
for f in sys.argv[1:]:
    if f.endswith(".jsonl"): n+=sum(len(json.loads(l)["text"].encode()) for l in open(f,encoding="utf-8") if l.strip())
    else: n+=len(open(f,"rb").read())
print(n)' $C/*)

"$bin" tokenize --val-fraction 0 --threads 1 -o "$T/one/c" $C/* 2>"$T/log" || { cat "$T/log"; fail "tokenize exited $?"; }
grep -q "8 files, $docs documents (0 val)" "$T/log" || { cat "$T/log"; fail "summary line"; }
[ ! -e "$T/one/c_val_000000.bin" ] || fail "--val-fraction 0 wrote a val shard"
shards "$T/one/c" train >"$T/got"
cmp -s "$T/got" "$T/ref" || { diff "$T/got" "$T/ref" | head; fail "ids differ from the reference"; }
echo "ok: $docs documents, $bytes bytes of text: $(wc -l <"$T/ref") ids identical to gpt-3-encoder's (with 50256 before each document)"

"$bin" tokenize --val-fraction=0 --threads=3 --shard-tokens 100 -o "$T/three/c" $C/* 2>"$T/log" || { cat "$T/log"; fail "3 threads"; }
shards "$T/three/c" train >"$T/got3"
cmp -s "$T/got3" "$T/ref" || fail "3 threads and 100-token shards give other ids"
n=$(ls "$T/three/"c_train_*.bin | wc -l)
[ "$n" -eq $(( ($(wc -l <"$T/ref") + 99) / 100 )) ] || fail "$n shards of 100 tokens"
echo "ok: 3 threads, $n shards of <= 100 tokens: the same stream"

# validation: 12 documents, a quarter -> 3 whole documents, evenly spaced (g = 3, 7, 11)
"$bin" tokenize --val-fraction 0.25 -o "$T/split/c" $C/* 2>"$T/log" || { cat "$T/log"; fail "split"; }
grep -q "(3 val)" "$T/log" || { cat "$T/log"; fail "3 val documents expected"; }
shards "$T/split/c" train >"$T/tr"; shards "$T/split/c" val >"$T/va"
python3 - "$T/ref" "$T/tr" "$T/va" <<'PY' || fail "the split is not documents 3, 7 and 11"
import sys
ref, tr, va = ([int(x) for x in open(p)] for p in sys.argv[1:])
docs, cur = [], None
for t in ref:
    if t == 50256:
        cur = [t]; docs.append(cur)
    else:
        cur.append(t)
want_va = [t for g in (3, 7, 11) for t in docs[g]]
want_tr = [t for g, d in enumerate(docs) if g not in (3, 7, 11) for t in d]
assert va == want_va and tr == want_tr, (len(va), len(want_va))
PY
echo "ok: --val-fraction 0.25 sends documents 3, 7, 11 of 12 to val, whole"

# one document: val takes its last tokens
"$bin" tokenize -o "$T/single/c" --val-fraction 0.1 $C/05-code.txt 2>"$T/log" || { cat "$T/log"; fail "single"; }
shards "$T/single/c" train >"$T/tr"; shards "$T/single/c" val >"$T/va"
ntr=$(wc -l <"$T/tr") nva=$(wc -l <"$T/va")
awk '/^05-code.txt /{print 50256; for (i = 2; i <= NF; i++) print $i}' test/tokenize/reference_ids.txt >"$T/ref5"
cat "$T/tr" "$T/va" | cmp -s - "$T/ref5" || fail "one document: train + val is not the document"
[ "$nva" -eq $(python3 -c "print(round(0.1 * ($(wc -l <"$T/ref5") - 1)))") ] || fail "one document: $nva val tokens"
echo "ok: one document: $ntr train tokens (with the 50256), the last $nva in val"

# the progress bar
"$bin" tokenize --progress on --val-fraction 0 -o "$T/p/c" $C/* 2>"$T/log" || fail "progress"
grep -q $'\r\033\\[Ktokenize \\[####################\\] 100%' "$T/log" || { cat -v "$T/log"; fail "no progress bar"; }
echo "ok: --progress on draws the bar"

# the shards train a GPT (data.kind: tokens reads them)
cat >"$T/job.yaml" <<YAML
model: {kind: gpt, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 50257, seq_len: 16}
data: {kind: tokens, train: "$T/split/c_train_*.bin", val: "$T/split/c_val_000000.bin"}
train: {steps: 3, global_batch: 2, micro_batch: 2, lr: 1.0e-3, eval_every: 3, eval_batches: 1}
log: {metrics: $T/run.jsonl}
YAML
"$bin" --nproc-per-node=1 "$T/job.yaml" >"$T/train.log" 2>&1 || { tail "$T/train.log"; fail "training on the shards"; }
grep -q '"val_loss"' "$T/run.jsonl" || fail "no val_loss in the run"
echo "ok: a GPT trains 3 steps on the shards and evaluates on the val shard"

# bad input: one line, documented status
expect() { # STATUS WHAT-SUBSTRING ARGS...
  local want=$1 what=$2; shift 2
  "$bin" tokenize "$@" >"$T/out" 2>"$T/err"; local rc=$?
  [ "$rc" -eq "$want" ] || { cat "$T/err"; fail "$*: exit $rc, want $want"; }
  [ "$(wc -l <"$T/err")" -eq 1 ] || { cat "$T/err"; fail "$*: not one line"; }
  grep -qF -- "$what" "$T/err" || { cat "$T/err"; fail "$*: no '$what'"; }
  echo "ok: exit $rc: $(cat "$T/err")"
}
printf 'caf\xe9 au lait\nsecond line \xff\n' >"$T/latin1.txt"
printf '{"text": "fine"}\n{"txt": "no text field"}\n' >"$T/nofield.jsonl"
printf '{"text": "fine"}\n{"text": unquoted}\n' >"$T/badjson.jsonl"
printf '\n \n' >"$T/blank.jsonl"
expect 3 "$T/missing.txt: cannot read (No such file or directory)" -o "$T/x/c" "$T/missing.txt"
expect 3 "$T/latin1.txt:1:4: not UTF-8 (byte 0xe9 at offset 3)" -o "$T/x/c" $C/01-english.txt "$T/latin1.txt"
expect 3 "$T/nofield.jsonl:2: no document field ('text'" -o "$T/x/c" "$T/nofield.jsonl"
expect 3 "$T/badjson.jsonl:2: not valid JSON" -o "$T/x/c" "$T/badjson.jsonl"
expect 3 "no documents in the input" -o "$T/x/c" "$T/blank.jsonl"
expect 3 "$C: cannot read (a directory, not a text file)" -o "$T/x/c" $C
expect 1 "/proc/dtrun-no/c_train_000000.bin: cannot write" -o /proc/dtrun-no/c $C/06-short.txt
expect 2 "unknown option '--bogus'" --bogus -o "$T/x/c" $C/06-short.txt
expect 2 "--val-fraction '1.5': want a number in [0, 1)" --val-fraction 1.5 -o "$T/x/c" $C/06-short.txt
expect 2 "--threads '0'" --threads 0 -o "$T/x/c" $C/06-short.txt
expect 2 "no output: give -o PREFIX" $C/06-short.txt
expect 2 "no input files" -o "$T/x/c"
expect 2 "-o '$T' is a directory" -o "$T" $C/06-short.txt
[ -z "$(ls "$T/x" 2>/dev/null)" ] || { ls "$T/x"; fail "a failed run left files behind"; }
echo "ok: failed runs leave no shard behind"
echo "PASS"
