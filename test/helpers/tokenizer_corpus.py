#!/usr/bin/env python3
"""tokenizer_corpus.py OUT.jsonl [N] — N (default 3200) documents for checking a
tokenizer against Hugging Face's, one JSON object {"text": ...} a line,
deterministic (seed 27). Each document is a fortune from Debian's `fortunes`
package (real English prose, code, verse) with pieces spliced in that a
pre-tokenizer must get right:

  emoji (ZWJ families, skin tones, flags, keycaps), CJK (Chinese, Japanese
  kana, Korean), combining marks (decomposed accents, stacked marks,
  Devanagari, Thai), digit runs (1 to 12 digits, Arabic-Indic, fullwidth,
  superscripts, Roman numerals), whitespace runs (spaces, tabs, CR LF,
  U+00A0, U+3000, U+2028, U+0085, U+180E which PCRE2 and Oniguruma class
  differently, and U+200B/U+FEFF which are not White_Space), contractions in
  both cases and with a long s, and the text of special tokens, whole and cut.

Characters come from long-assigned blocks only, so the Unicode versions of
PCRE2 10.42 (14.0), Oniguruma and Rust agree on their classes."""
import glob
import json
import os
import random
import sys

out = sys.argv[1]
n_docs = int(sys.argv[2]) if len(sys.argv) > 2 else 3200
rng = random.Random(27)

fortunes = []
for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if os.path.isfile(f) and not f.endswith((".dat", ".u8")):
        text = open(f, encoding="utf-8", errors="replace").read()
        fortunes += [d.strip("\n") for d in text.split("\n%\n") if d.strip()]
if not fortunes:
    sys.exit("tokenizer_corpus.py: no fortunes in /usr/share/games/fortunes (apt-get install fortunes)")

EMOJI = ["😀", "👍🏽", "👩‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "1️⃣", "❤️", "🧑🏿‍🚀", "🎉🎉🎉", "👨‍💻", "🙂🙃", "✨", "🏳️‍🌈"]
CJK = ["日本語のテキストです。", "中文分词测试，", "한국어 문장입니다", "カタカナとひらがな", "東京都", "漢字", "你好，世界！",
       "ｆｕｌｌｗｉｄｔｈ", "「引用」", "〜"]
MARKS = ["e\u0301", "a\u0300\u0316", "n\u0303", "Z\u0351\u0353\u0335", "\u0915\u093f\u0924\u093e\u092c",
         "\u0e01\u0e34\u0e19\u0e02\u0e49\u0e32\u0e27", "o\u0308\u0304", "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd",
         "\u1100\u1161\u11a8", "i\u0307"]
SCRIPTS = ["Ελληνικά κείμενα", "русский текст", "العربية نص", "עברית", "हिन्दी पाठ", "ภาษาไทย", "Tiếng Việt",
           "ქართული", "Հայերեն", "Ⅻ Ⅳ ⅷ", "ǅemal", "ſtraße STRASSE", "İstanbul ıi"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u0085",
          "\u180e", "\u200b", "\ufeff", " \u00a0 ", "\u2003\u2009", "\f", "\v"]
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|endoftext|>", "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>",
           "<|reserved_special_token_5|>", "<|end", "<|", "|>", "<|endoftext", "< |endoftext|>", "<|im_start|>"]
CONTRACTIONS = ["'s", "'S", "'t", "'re", "'RE", "'ve", "'Ve", "'m", "'M", "'ll", "'LL", "'d", "'D", "'ſ", "’s",
                "''s", " 's", "'sa"]
PUNCT = ["...", "!?", "--", "—", "«»", "(x)", "[]{}", "@#$%", "¿¡", "…", "\"quoted\"", "https://example.org/a?b=1&c=2",
         "foo_bar(baz);", "x += 1;", "<div class=\"a\">", "a/b\\c"]


def digits():
    k = rng.choice([1, 2, 3, 4, 5, 6, 7, 9, 12])
    run = "".join(rng.choice("0123456789") for _ in range(k))
    return rng.choice([run, run, " " + run, run + ",000", "3.14159", "٣٤٥", "０１２", "x²³", "½¼", "1st", "v2.0.1",
                       "2026-11-28", "$" + run])


def splice():
    kind = rng.randrange(9)
    if kind == 0: return rng.choice(EMOJI)
    if kind == 1: return rng.choice(CJK)
    if kind == 2: return rng.choice(MARKS)
    if kind == 3: return digits()
    if kind == 4: return "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 4)))
    if kind == 5: return rng.choice(SPECIAL)
    if kind == 6: return rng.choice(CONTRACTIONS)
    if kind == 7: return rng.choice(SCRIPTS)
    return rng.choice(PUNCT)


with open(out, "w", encoding="utf-8") as f:
    for i in range(n_docs):
        text = rng.choice(fortunes)
        if len(text) > 1200:
            start = rng.randrange(len(text) - 1000)
            text = text[start:start + 1000]
        for _ in range(rng.randint(1, 8)):  # splice at random character positions
            at = rng.randint(0, len(text))
            text = text[:at] + splice() + text[at:]
        if i % 50 == 0:
            text = splice() + text  # some documents start with one
        if i % 37 == 0:
            text = text + "".join(rng.choice(SPACES) for _ in range(3))  # or end in whitespace
        f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
