#!/usr/bin/env python3
"""tokenizer_variants.py LLAMA31.json GPT2.json OUT_DIR — tokenizer.json files
made from two real ones, each exercising what the real ones (those two, Llama
3.0's and Qwen2.5's) do not, for
test/integration/tokenizer_json.sh to check against Hugging Face's library:

  llama31-array-merges   Llama 3.1's merges as [first, second] arrays (the form
                         tokenizers >= 0.20 writes) instead of "first second"
  smollm-style           SmolLM's pre-tokenizer (Digits, individual, then
                         ByteLevel with its regex) on GPT-2's vocabulary
  split-BEHAVIOR[-invert]  Split on punctuation runs or a whitespace character,
                         each of the five behaviours, inverted or not, then
                         ByteLevel with add_prefix_space
  string-digits-prefix   a Split on the string " " (MergedWithNext), Digits
                         in runs, ByteLevel with add_prefix_space and its regex
  nfkd-added-roberta     NFKD then NFC, added tokens normalized or not, with
                         lstrip / rstrip, RobertaProcessing
  empty-matches          a Split whose regex matches only empty strings
                         (a lookahead), which still cut the text
  two-pass-added         no normalizer, an unnormalized added token "the" and
                         normalized ones " the", "there" that contain it: the
                         unnormalized are cut out first, the rest after
"""
import copy
import json
import sys

llama, gpt2, out = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]


def save(name, t):
    with open(f"{out}/{name}.json", "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False)


def byte_level(prefix=False, regex=False):
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": regex}


t = copy.deepcopy(llama)
t["model"]["merges"] = [m.split(" ") for m in t["model"]["merges"]]
save("llama31-array-merges", t)

t = copy.deepcopy(gpt2)
t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                             byte_level(regex=True)]}
save("smollm-style", t)

for behavior in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
    for invert in [False, True]:
        t = copy.deepcopy(gpt2)
        t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{P}+|\\s"}, "behavior": behavior, "invert": invert},
            byte_level(prefix=True)]}
        save(f"split-{behavior}{'-invert' if invert else ''}", t)

t = copy.deepcopy(gpt2)
t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
    {"type": "Digits", "individual_digits": False}, byte_level(prefix=True, regex=True)]}
save("string-digits-prefix", t)

t = copy.deepcopy(gpt2)
t["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "NFC"}]}
t["added_tokens"] += [
    {"id": 50257, "content": "ﬁx", "single_word": False, "lstrip": True, "rstrip": True, "normalized": True,
     "special": False},
    {"id": 50258, "content": " Cogito", "single_word": False, "lstrip": False, "rstrip": True, "normalized": False,
     "special": False},
    {"id": 50259, "content": "<|im_start|>", "single_word": False, "lstrip": True, "rstrip": False,
     "normalized": False, "special": True}]
t["post_processor"] = {"type": "RobertaProcessing", "sep": ["<|endoftext|>", 50256], "cls": ["<|endoftext|>", 50256],
                       "trim_offsets": True, "add_prefix_space": False}
save("nfkd-added-roberta", t)

t = copy.deepcopy(gpt2)
t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?=[A-Z])"}, "behavior": "Isolated", "invert": False},
    byte_level(regex=True)]}
save("empty-matches", t)

t = copy.deepcopy(gpt2)
t["added_tokens"] += [
    {"id": 50257, "content": "the", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
     "special": False},
    {"id": 50258, "content": " the", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True,
     "special": False},
    {"id": 50259, "content": "there", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True,
     "special": False},
    {"id": 50260, "content": "in", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True,
     "special": False}]
save("two-pass-added", t)
