#!/usr/bin/env bash
# The quickstart GPT (configs/quickstart.yaml: byte-level, 4 layers, d 128, on
# Debian's fortunes) trained on one process for 200 steps in fp32 and in bf16
# mixed precision (bf16 weights, activations and gradients, fp32 master and
# AdamW), for two seeds (1337, the quickstart's, and 6): bf16 must learn as
# fp32 does. make test runs seed 1337 for 100 steps (below).
#
# Why curves, not steps. Two runs that differ by one rounding are two
# trajectories of a chaotic system: they part after a few steps. Per-step
# agreement (2 % at every step from 50 on) was seed-fragile: at seed 99 bf16
# drifts up to 8.6 % (GELU of the rounded pre-activation) and 16.5 % (GELU in
# the fc GEMM's epilogue) from fp32, and that one move of a rounding point took
# seed 1337's worst step from 1.03 % to 2.63 %. So the test compares what a
# trajectory change leaves alone: the training loss averaged over 20-step
# windows (steps 41-60, 61-80, ..., 181-200: past the 10-step warm-up and the
# first steep descent; each window is the same 20 batches on both runs) and
# the validation loss at every evaluation (steps 50, 100, 150, 200). Each
# must be within TOL of fp32's at the same seed, for both seeds; and both runs
# of each seed must have learned (the last window below 0.7 x the first
# step's loss, every step's loss finite), so two broken runs cannot agree.
#
# TOL = 4 %, from measurements (2 cores, CPU backend, 2026-11-26):
#  - fp32 against fp32 with another seed (other initialisation and batches),
#    7 seeds (1337, 1-6), every pair: at most 2.50 % apart in a window (41-60;
#    <= 2.13 % from step 61 on), 2.27 % in validation loss (step 50; <= 1.06 %
#    from step 100 on). TOL is 1.6x that: bf16 must stay as close to fp32 as
#    fp32 runs of different seeds stay to each other, with a margin.
#  - bf16 against fp32 at the same seed, the legitimate variants (GELU of
#    the rounded pre-activation or in the fc GEMM's epilogue, seeds 1337 and
#    1-6; micro_batch 4 and 16 besides 8 at seeds 1337, 2, 6): at most 2.50 %
#    in a window and 3.17 % in validation loss (step 50), <= 0.58 % from step
#    100 on; at seeds 1337 and 6: <= 2.26 %.
#  - the exception is a seed whose fp32 run sits on a plateau: seed 99's fp32
#    run stays near 3.2-3.3 until step ~120 (11-20 % above the other seeds)
#    and bf16 leaves it sooner (up to 7 % below fp32 with the two ops, 15 %
#    with the epilogue). The seeds here do not; should a change put one of
#    them on a plateau, the other seed and the table this test prints tell a
#    trajectory change from a slower bf16.
#  - broken bf16 (the CPU mixed AdamW or rounding changed by hand for the
#    measurement, not committed), gaps at seeds 1337 and 6: no update of the
#    master, or gradients zeroed: +99-116 % (does not learn); lr x 4:
#    +10-19 % (learns badly); lr x 0.1: +20-21 % over steps 41-60, +6.7-7.3 %
#    at the end (learns clearly slower): all fail. Within TOL, not caught:
#    lr x 0.25 (+2.6-3.5 % up to step 60, +1.2-1.8 % at the end: inside
#    fp32's seed-to-seed spread), bf16 weights without the fp32 master
#    (<= +1.24 %: at lr 3e-3 the updates stay far above bf16's ulp for 200
#    steps), truncating instead of rounding the activations or the gradient
#    accumulation (<= 1.05 %): none of them slows this run's learning.
# One 200-step run took 27-28 s on an idle core (2026-11-26; 50-57 s on
# 2026-11-28, load 1-2); the fp32 and bf16 runs of a seed run side by side
# (one thread each). 100 steps (2026-11-28, seeds 1337 / 6 / 2): bf16 within
# +2.19 / -0.05 / +0.11 % of fp32 in every window and validation, 28 CPU s a run.
set -u
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/dtrun-quickstart-bf16.XXXXXX) pids=()
trap '[ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# make test runs the quickstart's seed for 100 steps (windows 41-60, 61-80,
# 81-100, validation at 50 and 100: where the gaps above are largest, and
# where every broken bf16 listed above already fails); make test-full
# (DTRUN_TEST_FULL=1) both seeds for 200 steps.
SEEDS="1337" STEPS=100 TOL=0.04
[ "${DTRUN_TEST_FULL:-0}" = 1 ] && SEEDS="1337 6" STEPS=200
scripts/data/text-corpus.sh "$T/fortunes.txt" >/dev/null 2>"$T/corpus.err" ||
  { cat "$T/corpus.err"; echo "SKIP: no fortunes corpus (make deps installs Debian's fortunes)"; exit 77; }
for seed in $SEEDS; do
  pids=()
  for prec in fp32 bf16; do
    r=$prec-$seed
    sed -e "s|^  train: data/fortunes.txt|  train: $T/fortunes.txt|" \
        -e "s|^  metrics: .*|  metrics: $T/$r.jsonl|" -e "s|^  tensorboard: .*|  tensorboard: $T/$r-tb|" -e '/^checkpoint:/,/^  resume:/d' \
        -e "s/^  steps: .*/  steps: $STEPS/" -e 's/^  dp: .*/  dp: 1/' -e 's/^  every: .*/  every: 1/' \
        -e "s/^  seed: .*/  seed: $seed\n  precision: $prec\n  threads: 1/" \
        configs/quickstart.yaml >"$T/$r.yaml"
    grep -q "precision: $prec" "$T/$r.yaml" && grep -q "seed: $seed\$" "$T/$r.yaml" || fail "could not write the $r job"
    timeout -k 5 300 bin/dtrun "$T/$r.yaml" >"$T/$r.log" 2>&1 &
    pids+=($!)
  done
  rcs=()
  for pid in "${pids[@]}"; do wait "$pid"; rcs+=($?); done
  pids=()
  for i in 0 1; do
    r=$([ $i -eq 0 ] && echo fp32 || echo bf16)-$seed
    [ "${rcs[$i]}" -eq 0 ] || { tail -n 20 "$T/$r.log"; fail "the $r run failed (exit ${rcs[$i]})"; }
  done
done
python3 - "$T" "$TOL" "$STEPS" $SEEDS <<'PY'
import json, math, sys
d, tol, STEPS, seeds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
WINDOWS = [(a, a + 19) for a in range(41, STEPS, 20)]
def load(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if l.strip()]
    loss = {r["step"]: r["loss"] for r in rows if "loss" in r}
    val = {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}
    return loss, val
def finite(x): return isinstance(x, (int, float)) and math.isfinite(x)
ok = True
for seed in seeds:
    (fl, fv), (bl, bv) = load(f"fp32-{seed}"), load(f"bf16-{seed}")
    complete = True
    for prec, l in (("fp32", fl), ("bf16", bl)):
        bad = [s for s in range(1, STEPS + 1) if not finite(l.get(s))]
        if bad:
            print(f"FAIL seed {seed} {prec}: no finite loss at {len(bad)} steps (first {bad[0]})")
            complete = ok = False
    if not complete: continue
    def win(l, a, b): return sum(l[s] for s in range(a, b + 1)) / (b - a + 1)
    rows = [(f"train loss, steps {a}-{b}", win(fl, a, b), win(bl, a, b)) for a, b in WINDOWS]
    vsteps = sorted(s for s in fv if s >= 50)
    if not vsteps or any(s not in bv for s in vsteps) or not all(finite(fv[s]) for s in vsteps):
        print(f"FAIL seed {seed}: validation losses fp32 {fv}, bf16 {bv}"); ok = False
    rows += [(f"val loss, step {s}", fv[s], bv[s]) for s in vsteps if s in bv and finite(fv[s])]
    for what, x, y in rows:
        rel = (y - x) / x if finite(y) else math.nan
        good = abs(rel) <= tol
        ys = f"{y:.4f}" if finite(y) else str(y)
        print(("ok   " if good else "FAIL ") + f"seed {seed} {what}: bf16 {ys} vs fp32 {x:.4f} "
              f"({100 * rel:+.2f} %, limit {100 * tol:g} %)")
        ok &= good
    for prec, l in (("fp32", fl), ("bf16", bl)):
        last = win(l, *WINDOWS[-1])
        learned = last < 0.7 * l[1]
        print(("ok   " if learned else "FAIL ") + f"seed {seed} {prec} learned: loss {l[1]:.3f} at step 1, "
              f"{last:.3f} over steps {WINDOWS[-1][0]}-{WINDOWS[-1][1]} (limit {0.7 * l[1]:.3f})")
        ok &= learned
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] || fail "bf16 does not learn as fp32 does (smoothed curves and validation within $TOL)"
echo "PASS quickstart_bf16"
