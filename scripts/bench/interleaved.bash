# interleaved.bash — two variants of the cpu-train job measured side by side
# in one sitting (sourced by bf16-train.sh and attention-train.sh): each round
# trains $tmp/A.yaml then $tmp/B.yaml (their metrics in $tmp/A.jsonl, ...),
# takes the median tokens/s over steps 6..N, and the best round of each is
# printed with the ratio B / A.
#   interleaved_rounds ROUNDS TMP A B
interleaved_rounds() {
  local rounds=$1 tmp=$2 a=$3 b=$4 r kind load0
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  : >"$tmp/rows"
  for ((r = 1; r <= rounds; r++)); do
    for kind in "$a" "$b"; do
      OMP_NUM_THREADS=2 bin/dtrun "$tmp/$kind.yaml" >/dev/null 2>&1
      python3 - "$tmp/$kind.jsonl" "$kind" >>"$tmp/rows" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print(sys.argv[2], statistics.median(r["tokens_per_s"] for r in rows[5:]))
PY
      rm -f "$tmp/$kind.jsonl"
    done
  done
  echo "rounds: $rounds  load: $load0 -> $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$tmp/rows" "$a" "$b" <<'PY'
import sys
a, b = sys.argv[2], sys.argv[3]
best = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    print(f"  {k} {float(v):.0f} tok/s")
    best[k] = max(best.get(k, 0.0), float(v))
print(f"cpu-train tok/s  {a} {best[a]:9.1f}  {b} {best[b]:9.1f}  {b}/{a} {best[b] / best[a]:.3f}")
PY
}
