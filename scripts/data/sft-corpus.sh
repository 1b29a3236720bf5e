#!/usr/bin/env bash
# A small instruction set from Debian's `fortunes` package, deterministically
# (no randomness: every choice is a function of the fortune's text and place),
# for `dtrun tokenize` and configs/sft-tiny.yaml. Each fortune becomes one
# (instruction, answer) pair:
#   a riddle "Q: ... A: ..."            -> the question, the answer
#   "Term:" then indented text         -> "Define Term.", the definition
#   a quotation ending "-- Author"     -> "Quote Author.", the quotation
#   two lines or more                  -> "Continue this fortune: FIRST LINE",
#                                         the other lines
#   one line                           -> "Tell me a fortune from FILE.", it
# Written as
#   OUT/fortunes_pc.jsonl     {"prompt": INSTRUCTION + "\n", "completion": ANSWER}
#                             (plain text without a chat template: the newline
#                             parts the two; the loss counts the answer)
#   OUT/fortunes_chat.jsonl   {"messages": [...]}: the pairs two by two as a
#                             two-turn chat (user, assistant, user, assistant),
#                             every third with a system message first
# and, unless SFT_SHARDS=0, SFT shards of fortunes_pc.jsonl with GPT-2's
# built-in tokenizer (the tiny models' vocabulary, 50257; <|endoftext|> ends
# each sample; 1% of the samples for validation):
#   OUT/fortunes_train_000000.bin, OUT/fortunes_val_000000.bin
#
#   scripts/data/sft-corpus.sh [OUT]         # default data/sft
#   FORTUNES_DIR=/path DTRUN=bin/dtrun SFT_SHARDS=1 scripts/data/sft-corpus.sh OUT
# JSONL files are rewritten only when their content would change. Prints
# "OUT/fortunes_pc.jsonl: N samples, OUT/fortunes_chat.jsonl: M conversations
# (from F fortune files)", then dtrun tokenize's summary line.
set -euo pipefail
out=${1:-data/sft}
src=${FORTUNES_DIR:-/usr/share/games/fortunes}
dtrun=${DTRUN:-bin/dtrun}
if [ ! -d "$src" ]; then
  echo "$src: missing (install it: apt-get install fortunes)" >&2
  exit 1
fi
if [ "${SFT_SHARDS:-1}" != 0 ] && [ ! -x "$dtrun" ]; then
  echo "$dtrun: not built (make all), or give DTRUN=PATH, or SFT_SHARDS=0 for the JSONL alone" >&2
  exit 1
fi
mkdir -p "$out"
python3 - "$src" "$out" <<'PY'
import json, os, re, sys

src, out = sys.argv[1], sys.argv[2]
files = sorted(f for f in os.listdir(src)
               if os.path.isfile(os.path.join(src, f)) and not f.endswith((".dat", ".u8")))
if not files:
    sys.exit(f"{src}: no fortune files (install them: apt-get install fortunes)")


def flat(s):
    return re.sub(r"\s+", " ", s).strip()


def pair(name, text):
    """One fortune as (instruction, answer), neither with white space at its ends."""
    lines = text.split("\n")
    qa = re.match(r"Q:\s*(.*?)\n\s*A:\s*(.*)", text, re.S)
    if qa and flat(qa.group(1)) and flat(qa.group(2)):
        return flat(qa.group(1)), flat(qa.group(2))
    if len(lines) >= 2 and lines[0].endswith(":") and len(lines[0]) <= 60 and lines[1][:1] in ("\t", " "):
        return f"Define {lines[0][:-1].strip()}.", "\n".join(l.strip() for l in lines[1:]).strip()
    attrib = re.search(r"\n\s*-- ?([^\n]+)$", text)
    if attrib and 0 < len(flat(attrib.group(1))) <= 60:
        body = text[:attrib.start()].strip()
        if body:
            return f"Quote {flat(attrib.group(1))}.", body
    if len(lines) >= 2 and lines[0].strip() and "\n".join(lines[1:]).strip():
        return f"Continue this fortune: {lines[0].strip()}", "\n".join(lines[1:]).strip()
    return f"Tell me a fortune from {name}.", text.strip()


pairs = []
for name in files:
    raw = open(os.path.join(src, name), encoding="utf-8", errors="replace").read()
    for text in raw.replace("\r", "").split("\n%\n"):
        text = text.strip("\n")
        if text.strip() and text.strip() != "%":
            p, c = pair(name, text)
            if p and c:
                pairs.append((p, c))


def write(path, rows):
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if not (os.path.exists(path) and open(path, encoding="utf-8").read() == data):
        tmp = path + ".tmp"
        open(tmp, "w", encoding="utf-8").write(data)
        os.replace(tmp, path)


write(f"{out}/fortunes_pc.jsonl", [{"prompt": p + "\n", "completion": c} for p, c in pairs])
chats = []
for k in range(0, len(pairs) - 1, 2):
    (p1, c1), (p2, c2) = pairs[k], pairs[k + 1]
    msgs = [{"role": "user", "content": p1}, {"role": "assistant", "content": c1},
            {"role": "user", "content": p2}, {"role": "assistant", "content": c2}]
    if (k // 2) % 3 == 0:
        msgs.insert(0, {"role": "system", "content": "You are a fortune cookie: answer with one fortune."})
    chats.append({"messages": msgs})
write(f"{out}/fortunes_chat.jsonl", chats)
print(f"{out}/fortunes_pc.jsonl: {len(pairs)} samples, {out}/fortunes_chat.jsonl: {len(chats)} conversations "
      f"(from {len(files)} fortune files)")
PY
if [ "${SFT_SHARDS:-1}" != 0 ]; then
  "$dtrun" tokenize --progress off -o "$out/fortunes" "$out/fortunes_pc.jsonl"
fi
