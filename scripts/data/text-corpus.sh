#!/usr/bin/env bash
# Builds a byte-level text corpus from Debian's `fortunes` package: every fortune
# text file (not the .dat indexes nor the .u8 links to the same text) in sorted
# order, without the '%' lines that separate fortunes. About 2.7 MB.
#   scripts/data/text-corpus.sh [OUT]        # default data/fortunes.txt
#   FORTUNES_DIR=/path scripts/data/text-corpus.sh OUT
# Idempotent: OUT is rewritten only when its content would change. Prints
# "OUT: N bytes from M files".
set -euo pipefail
out=${1:-data/fortunes.txt}
src=${FORTUNES_DIR:-/usr/share/games/fortunes}

if [ ! -d "$src" ]; then
  echo "$src: missing (install it: apt-get install fortunes)" >&2
  exit 1
fi
mapfile -t files < <(find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort)
if [ ${#files[@]} -eq 0 ]; then
  echo "$src: no fortune files (install them: apt-get install fortunes)" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
LC_ALL=C grep -hva '^%$' "${files[@]}" >"$tmp"
if [ -f "$out" ] && cmp -s "$tmp" "$out"; then
  rm -f "$tmp"
else
  chmod 644 "$tmp"
  mv -f "$tmp" "$out"
fi
echo "$out: $(stat -c %s "$out") bytes from ${#files[@]} files"
