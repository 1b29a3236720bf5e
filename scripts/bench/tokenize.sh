#!/usr/bin/env bash
# dtrun tokenize against two JavaScript GPT-2 tokenizers under node, on the same
# corpus in the same run: gpt-3-encoder 1.1.4 (the port of OpenAI's encoder.py
# that the test ids come from) and gpt-tokenizer 4.0.0 (a maintained, optimised
# one). The corpus: every fortune of Debian's `fortunes` package as one JSONL
# document (~2.7 MB, split into FILES files so that threads have work).
# Checks that all three give the same ids (EOT before each document), then
# prints MB/s (input bytes / seconds of reading + parsing + encoding; loading
# the vocabulary not counted on either side) and the ratios, best of ROUNDS.
#   scripts/bench/tokenize.sh            ROUNDS=3 FILES=8
# Needs node and npm (the two packages are fetched once with npm pack into
# build/npm and their sha256 checked).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3} FILES=${FILES:-8}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
command -v node >/dev/null || { echo "tokenize.sh: node is not installed" >&2; exit 1; }
make -s all
enc3=$(scripts/data/gpt2-npm-encoder.sh)
gt=build/npm/gpt-tokenizer
if [ ! -f $gt/cjs/encoding/gpt2.js ]; then
  (cd build/npm && npm pack --silent gpt-tokenizer@4.0.0 >/dev/null)
  got=$(sha256sum build/npm/gpt-tokenizer-4.0.0.tgz | cut -d' ' -f1)
  [ "$got" = e50075c9a98389fbe59bf6b42d8d50b49c1cbd7aec6c205bfc28847ee0eeb20a ] ||
    { echo "tokenize.sh: gpt-tokenizer-4.0.0.tgz has sha256 $got" >&2; exit 1; }
  rm -rf $gt && mkdir -p $gt && tar -xzf build/npm/gpt-tokenizer-4.0.0.tgz -C $gt --strip-components=1
fi

W=build/bench/tokenize
rm -rf $W && mkdir -p $W
scripts/data/fortunes-jsonl.py "$W" "$FILES"
files=($W/fortunes_*.jsonl)
bytes=$(cat "${files[@]}" | wc -c)
echo "corpus: $bytes bytes; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"

best() { sort -g | tail -1; }
d1=() dn=() p3=() pg=()
for r in $(seq "$ROUNDS"); do
  for t in 1 "$(nproc)"; do
    line=$(bin/dtrun tokenize --progress off --val-fraction 0 --threads "$t" -o $W/dt$t "${files[@]}" 2>&1 | tail -1)
    mbs=$(sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p' <<<"$line")
    [ "$t" = 1 ] && d1+=("$mbs") || dn+=("$mbs")
  done
  for peer in gpt-3-encoder gpt-tokenizer; do
    dir=$enc3; [ $peer = gpt-tokenizer ] && dir=$gt
    out=$(node scripts/bench/tokenize_peer.js $peer $dir $W/$peer.ids "${files[@]}")
    secs=$(awk '{print $3}' <<<"$out")
    mbs=$(awk -v b="$bytes" -v s="$secs" 'BEGIN{printf "%.2f", b/s/1e6}')
    [ $peer = gpt-3-encoder ] && p3+=("$mbs") || pg+=("$mbs")
  done
  echo "round $r: dtrun 1 thread ${d1[-1]} MB/s, $(nproc) threads ${dn[-1]} MB/s; gpt-3-encoder ${p3[-1]} MB/s; gpt-tokenizer ${pg[-1]} MB/s"
done

# the same ids from all three: dtrun's shard without its 1024-byte header
tail -c +1025 $W/dt1_train_000000.bin >$W/dtrun.ids
cmp -s $W/dtrun.ids $W/gpt-3-encoder.ids || { echo "tokenize.sh: dtrun's ids differ from gpt-3-encoder's" >&2; exit 1; }
cmp -s $W/dtrun.ids $W/gpt-tokenizer.ids || { echo "tokenize.sh: dtrun's ids differ from gpt-tokenizer's" >&2; exit 1; }
cmp -s $W/dtrun.ids <(tail -c +1025 $W/dt$(nproc)_train_000000.bin) || { echo "tokenize.sh: thread counts differ" >&2; exit 1; }
echo "ids: identical in all three ($(( $(stat -c %s $W/dtrun.ids) / 2 )) tokens of $bytes bytes)"
D1=$(printf '%s\n' "${d1[@]}" | best) DN=$(printf '%s\n' "${dn[@]}" | best)
P3=$(printf '%s\n' "${p3[@]}" | best) PG=$(printf '%s\n' "${pg[@]}" | best)
awk -v d1="$D1" -v dn="$DN" -v p3="$P3" -v pg="$PG" -v n="$(nproc)" 'BEGIN{
  printf "best of rounds: dtrun %.1f MB/s (1 thread), %.1f MB/s (%d threads); gpt-3-encoder %.2f MB/s; gpt-tokenizer %.2f MB/s\n", d1, dn, n, p3, pg
  printf "ratio: dtrun 1 thread / gpt-3-encoder %.1fx, / gpt-tokenizer %.2fx; dtrun %d threads / gpt-tokenizer %.2fx\n", d1/p3, d1/pg, n, dn/pg }'
