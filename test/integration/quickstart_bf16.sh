#!/usr/bin/env bash
# The quickstart GPT (configs/quickstart.yaml: byte-level, 4 layers, d 128, on
# Debian's fortunes) trained on one process for 200 steps in fp32 and in bf16
# mixed precision (bf16 weights, activations and gradients, fp32 master and
# AdamW): bf16 follows fp32's loss within 2 % at step 200, the training loss
# (the same batch on both: same seed, same data order) and the validation loss
# alike, and at every evaluation on the way. Both runs must also have learned
# (step 200 well below the first step's loss), so two broken runs cannot agree.
set -u
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/dtrun-quickstart-bf16.XXXXXX); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
scripts/data/text-corpus.sh "$T/fortunes.txt" >/dev/null 2>"$T/corpus.err" ||
  { cat "$T/corpus.err"; echo "SKIP: no fortunes corpus (make deps installs Debian's fortunes)"; exit 77; }
for prec in fp32 bf16; do
  sed -e "s|^  train: data/fortunes.txt|  train: $T/fortunes.txt|" \
      -e "s|^  metrics: .*|  metrics: $T/$prec.jsonl|" -e "s|^  tensorboard: .*|  tensorboard: $T/$prec-tb|" -e '/^checkpoint:/,/^  resume:/d' \
      -e 's/^  steps: .*/  steps: 200/' -e 's/^  dp: .*/  dp: 1/' -e 's/^  every: .*/  every: 1/' \
      -e "s/^  seed: \(.*\)/  seed: \1\n  precision: $prec\n  threads: 1/" \
      configs/quickstart.yaml >"$T/$prec.yaml"
  grep -q "precision: $prec" "$T/$prec.yaml" || fail "could not write the $prec job"
  timeout -k 5 300 bin/dtrun "$T/$prec.yaml" >"$T/$prec.log" 2>&1 || { tail -n 20 "$T/$prec.log"; fail "$prec run failed"; }
done
python3 - "$T/fp32.jsonl" "$T/bf16.jsonl" <<'PY'
import json, sys
def rows(p):
    return [json.loads(l) for l in open(p) if l.strip()]
f, b = rows(sys.argv[1]), rows(sys.argv[2])
def at(rs, key, step):
    v = [r[key] for r in rs if r.get("step") == step and key in r]
    return v[-1] if v else None
ok = True
first = at(f, "loss", 1)
for key in ("loss", "val_loss"):
    steps = sorted({r["step"] for r in f if key in r and r["step"] >= 50})
    for s in steps:
        x, y = at(f, key, s), at(b, key, s)
        if y is None:
            print(f"FAIL bf16 has no {key} at step {s}"); ok = False; continue
        rel = abs(y - x) / abs(x)
        good = rel <= 0.02
        if s == 200 or not good:
            print(("ok   " if good else "FAIL ") + f"step {s} {key}: bf16 {y:.4f} vs fp32 {x:.4f} ({100*rel:.2f} %, limit 2 %)")
        ok &= good
x200 = at(f, "loss", 200)
learned = x200 is not None and x200 < 0.7 * first
print(("ok   " if learned else "FAIL ") + f"fp32 learned: loss {first:.3f} at the start, {x200} at step 200")
ok &= learned
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] || fail "bf16 does not follow fp32 within 2 %"
echo "PASS quickstart_bf16"
