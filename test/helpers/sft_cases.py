#!/usr/bin/env python3
"""sft_cases.py DOCS.jsonl SFT_DIR OUT_DIR [full] — instruction data for
checking `dtrun tokenize`'s SFT shards against Hugging Face (test/integration/
sft_tokenize.sh), deterministic (seed 29); the counts are those of `full`
(DTRUN_TEST_FULL=1), a quick run has about half (QUICK below):

  OUT/chat.jsonl  {"messages": ...}: the first 240 conversations of
                  scripts/data/sft-corpus.sh's fortunes_chat.jsonl, then 160
                  made of DOCS' texts (tokenizer_corpus.py: emoji, CJK,
                  decomposed accents, digit and whitespace runs, special-token
                  text), and the hard cases: replies that start with white
                  space or newlines (a token that joins the template's "\\n"
                  and the reply), that end with them, that are empty, a
                  system turn first and later, several assistant turns, the
                  text of <|eot_id|>, <|im_end|>, <|endoftext|> in a turn
  OUT/chat_small.jsonl  the first 30 of each kind and the hard cases, for
                  the templates that share a tokenizer with another
  OUT/conv.jsonl  ShareGPT's {"conversations": [{from, value}]} and
                  {"prompt": [messages], "completion": [messages]}: 120 of
                  chat.jsonl's conversations, fortunes and DOCS' alike
  OUT/pc.jsonl    {"prompt", "completion"} strings: the first 240 of
                  fortunes_pc.jsonl, then DOCS' texts cut in two at a
                  character, a space or a newline

A turn that Python's str.strip (what Jinja's trim is in transformers, and
dtrun) and JavaScript's trim (in @huggingface/jinja, the peer) would trim
differently (U+001C..U+001F, U+0085 and U+FEFF at its ends, after white
space or not) is trimmed here until both agree."""
import json
import random
import sys

docs_path, sft_dir, out = sys.argv[1:4]
FULL = sys.argv[4:5] == ["full"]
N_FORTUNE_CHATS, N_DOC_CHATS, N_CONV, N_FORTUNE_PC, N_DOC_PC = (240, 160, 120, 240, 200) if FULL else (60, 100, 60, 80, 100)
rng = random.Random(29)
docs = [json.loads(l)["text"] for l in open(docs_path, encoding="utf-8") if l.strip()]
DISAGREE = "\x1c\x1d\x1e\x1f\x85\ufeff"


# JavaScript's trim: ECMAScript's WhiteSpace and LineTerminator (Python's
# isspace less U+001C..U+001F and U+0085, with U+FEFF)
JS_SPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace() and c not in "\x1c\x1d\x1e\x1f\x85") + "\ufeff"


def safe(s):
    """s, or s trimmed further, so that both trims give the same text."""
    while s.strip() != s.strip(JS_SPACE):
        s = s.strip().strip(DISAGREE)
    return s


def doc():
    return safe(rng.choice(docs))


def write(name, rows):
    with open(f"{out}/{name}", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def user(c):
    return {"role": "user", "content": c}


def assistant(c):
    return {"role": "assistant", "content": c}


def system(c):
    return {"role": "system", "content": c}


chat = [json.loads(l) for l in open(f"{sft_dir}/fortunes_chat.jsonl", encoding="utf-8")][:N_FORTUNE_CHATS]
for k in range(N_DOC_CHATS):
    msgs = [system(doc())] if k % 4 == 0 else []
    for t in range(1 + k % 3):
        msgs += [user(doc()), assistant(doc())]
    chat.append({"messages": msgs})
hard = [
    [user("Hi"), assistant("\nHello on a new line")],
    [user("Hi"), assistant("\n\n\nThree newlines first")],
    [user("Hi"), assistant("  two spaces first")],
    [user("Hi"), assistant(" \t\n mixed white space first")],
    [user("Hi"), assistant("ends with newlines\n\n")],
    [user("Hi"), assistant("ends with spaces   ")],
    [user("Hi"), assistant("")],
    [user("   "), assistant("   ")],
    [user("Hi"), assistant("1234567 digits first")],
    [user("Hi"), assistant("'s a contraction first")],
    [user("Hi"), assistant("😀 emoji first")],
    [user("Hi"), assistant("e\u0301 a decomposed accent first\nand a second line o\u0308")],
    [user("Hi"), assistant("日本語の返事")],
    [system("Be terse."), user("one"), assistant("1"), system("Now be verbose."), user("two"), assistant("two, which is 2")],
    [user("a"), assistant("b"), user("c"), assistant("d"), user("e"), assistant("f")],
    [user("say <|eot_id|> and <|im_end|>"), assistant("ok: <|eot_id|> <|im_end|> <|endoftext|> done")],
    [user("Hi"), assistant("<|im_start|>assistant\nnested")],
    [system(""), user("empty system"), assistant("fine")],
    [user("multi\nline\nuser"), assistant("multi\nline\nreply\n")],
    [user("Hi"), assistant("\u3000ideographic space first")],
]
chat += [{"messages": m} for m in hard]
write("chat.jsonl", chat)
write("chat_small.jsonl", chat[:30] + chat[N_FORTUNE_CHATS:N_FORTUNE_CHATS + 30] + chat[-len(hard):])

frm = {"system": "system", "user": "human", "assistant": "gpt"}
conv = []
step = (N_FORTUNE_CHATS + N_DOC_CHATS) // N_CONV
for k, c in enumerate(chat[:N_FORTUNE_CHATS + N_DOC_CHATS:step][:N_CONV]):
    msgs = c["messages"]
    if k % 2 == 0:
        conv.append({"conversations": [{"from": frm[m["role"]], "value": m["content"]} for m in msgs]})
    else:  # the prompt is all but the last reply
        conv.append({"prompt": msgs[:-1], "completion": msgs[-1:]})
write("conv.jsonl", conv)

pc = [json.loads(l) for l in open(f"{sft_dir}/fortunes_pc.jsonl", encoding="utf-8")][:N_FORTUNE_PC]
for k in range(N_DOC_PC):
    d = doc()
    cut = rng.randrange(len(d) + 1)
    if k % 3 == 1 and " " in d:
        cut = d.index(" ")
    elif k % 3 == 2 and "\n" in d:
        cut = d.index("\n") + 1
    pc.append({"prompt": safe(d[:cut]), "completion": safe(d[cut:])})
pc += [{"prompt": "", "completion": "no prompt"}, {"prompt": "no completion", "completion": ""},
       {"prompt": "Q: capital of France?\nA:", "completion": " Paris."}, {"prompt": "A: ", "completion": "Paris"}]
write("pc.jsonl", pc)
print(f"cases: {len(chat)} chats, {len(conv)} conversations/prompt-completion chats, {len(pc)} prompt/completion pairs")
