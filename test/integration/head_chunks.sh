#!/usr/bin/env bash
# The GPT LM head in chunks of rows (issue 14; model.head_chunk_rows): the
# [N, V] logits never sit in memory, each chunk is computed in forward,
# reduced to its rows' statistics and dropped, and computed again in backward.
#
# 1. The same training run: a tiny GPT whose head works in chunks of 24 rows
#    (gpt-chunked: a micro-batch of 8 x 16 tokens is 5 chunks of 24 and one of
#    8) against the same GPT with its head in one chunk (gpt-odd-vocab), one
#    process each: every step's loss within a relative 1e-6, the parameters
#    after 20 steps within 1e-4. Only float sums change their grouping (d(wte)
#    is summed one chunk of rows at a time), so the losses agree to ~1e-7; the
#    parameter tolerance is the layout tests' (Adam turns the noise of
#    elements whose true gradient is zero into lr-sized steps: compare.py).
# 2. With the chunks, every layout that runs the head differently reproduces
#    that single process (lib.bash's tolerances): tp 2 and 4 (each rank's
#    per-chunk row statistics, max and sum of exps, combined over the group
#    once after the chunks, over an unevenly split vocabulary, 33 + 34 and
#    16 + 17 + 17 + 17 rows), tp 2 with sequence parallelism (the head gathers its
#    rows first), FSDP (the head's wte gathered again for the backward's
#    recompute), a 1F1B pipeline over tp 2 (chunks of 2-sample micro-batches:
#    24 + 8), ZeRO-2 with accumulation; and ZB-H1 stays bitwise 1F1B.
# 3. Memory, measured against the dry-run to the byte on every rank (one
#    process; tp 2 x pp 2, 1F1B): the runtime's accounting (account.h) is the
#    dry-run's, category by category; and the dry-run's logits column of the
#    chunked head is smaller than the one-chunk head's by exactly the rows it
#    does not hold, (N - 24) x V_l fp32 (64-byte aligned) on each tp rank.
# 4. GPT-2 124M in bf16 at micro_batch 16 x 1024 tokens (dry-run): the
#    logits column is what the head keeps per micro-batch (lnf, an activation,
#    in bf16: N x C / 2 floats; targets, lnf's two statistics and five loss
#    statistics: N x 8 floats) plus one chunk of 1024 x V floats: 232 MB
#    where the unchunked head held N x V floats, 3.34 GB; under tp 2 the
#    chunk halves with V_l.
# 5. Bad values: one line, exit 2.
source "$(dirname "$0")/../parallel/lib.bash"

# 1. chunked = one chunk, one process
reference gpt-odd-vocab 2
reference gpt-chunked 2
grep -q 'head_chunk_rows: 24' "$T/ref-gpt-chunked-2.yaml" || fail "gpt-chunked does not set head_chunk_rows"
out=$(python3 "$ROOT/test/parallel/compare.py" "$T/ref-gpt-odd-vocab-2.jsonl" "$T/ref-gpt-odd-vocab-2.bin" \
      "$T/ref-gpt-chunked-2.jsonl" "$T/ref-gpt-chunked-2.bin" 1e-6 1e-4 2>&1) ||
  { echo "$out"; fail "the head in chunks of 24 rows does not train as the head in one chunk"; }
echo "ok   gpt [one process]: head in chunks of 24 rows = one chunk: ${out##*$'\n'}"

# 2. layouts, chunked
for lay in "tp=2" "tp=4" "tp=2 sp=1" "dp=2 tp=2 mode=fsdp" "pp=2 sched=1f1b tp=2" "dp=2 mode=zero2 accum=2"; do
  run_layout gpt-chunked "$lay"
done
[ "$FAILS" -eq 0 ] || fail "$FAILS layouts with the chunked head differ from one process"
summary
for s in 1f1b zb-h1; do
  b=$T/zb-$s
  layout_job gpt-chunked "pp=2 sched=$s" "$b.yaml" "$b.jsonl"
  DTRUN_DUMP_PARAMS=$b.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$b.yaml" >"$b.log" 2>&1 ||
    { tail -n 8 "$b.log"; fail "gpt-chunked [pp=2 sched=$s] did not train"; }
done
cmp -s "$T/zb-1f1b.bin" "$T/zb-zb-h1.bin" || fail "gpt-chunked [pp=2]: zb-h1's parameters are not bitwise 1f1b's"
echo "ok   gpt-chunked [pp=2]: zb-h1 bitwise 1f1b"

# 3. memory: measured = dry-run, and the chunk's saving
mem_run() { # NAME MODEL LAYOUT WORLD
  layout_job "$2" "$3" "$T/$1.yaml" "$T/$1.jsonl"
  sed -i -e 's/^  steps: .*/  steps: 3/' "$T/$1.yaml"
  timeout -k 5 120 "$DTRUN" --nproc-per-node="$4" "$T/$1.yaml" >"$T/$1.log" 2>&1 ||
    { tail -n 20 "$T/$1.log"; fail "$1 did not train"; }
  "$DTRUN" --dry-run --format=json --hardware=cpu --nproc-per-node="$4" "$T/$1.yaml" >"$T/$1.dry.json" \
    2>"$T/$1.dry.err" || { cat "$T/$1.dry.err"; fail "$1: dry-run failed"; }
}
mem_run one-chunked gpt-chunked "pp=1" 1
mem_run one-whole gpt-odd-vocab "pp=1" 1
mem_run tp2pp2-chunked gpt-chunked "tp=2 pp=2 sched=1f1b" 4
mem_run tp2pp2-whole gpt-odd-vocab "tp=2 pp=2 sched=1f1b" 4
python3 - "$T" <<'PY' || fail "the chunked head's memory is not what the dry-run says"
import glob, json, sys
T = sys.argv[1]
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= bool(cond)
def pred(m):
    return {"params": m["params"] + m["master"], "grads": m["grads"], "optimizer": m["optimizer"],
            "activations": m["activations"] + m["logits"] + m["workspace"], "buffers": m["comm"],
            "total": m["allocated"]}
dry = {}
for name in ("one-chunked", "one-whole", "tp2pp2-chunked", "tp2pp2-whole"):
    d = dry[name] = json.load(open(f"{T}/{name}.dry.json"))
    for f in sorted(glob.glob(f"{T}/{name}.rank*.jsonl")):
        last = [json.loads(l) for l in open(f) if l.strip()][-1]
        r, meas = last["rank"], dict(last["mem_peak"])
        meas["params"] += meas.get("master", 0)
        c = d["mesh"][r]
        p = pred(d["stages"][c["pp"]]["memory_by_tp_rank"][c["tp"]])
        diff = {k: meas[k] - p[k] for k in p if meas[k] != p[k]}
        check(not diff, f"{name} rank {r} (pp {c['pp']}, tp {c['tp']}): measured = dry-run to the byte, "
              f"total {p['total']} B, activations {p['activations']} B" + (f"; differences {diff}" if diff else ""))
# the logits column: one chunk of 24 rows instead of one of all N rows
align = lambda b: (b + 63) // 64 * 64
V = 67
for lay, N, pp, tp in (("one", 8 * 16, 1, 1), ("tp2pp2", 2 * 16, 2, 2)):
    for t in range(tp):
        Vl = V * (t + 1) // tp - V * t // tp
        whole = dry[f"{lay}-whole"]["stages"][pp - 1]["memory_by_tp_rank"][t]["logits"]
        chunked = dry[f"{lay}-chunked"]["stages"][pp - 1]["memory_by_tp_rank"][t]["logits"]
        want = align(N * Vl * 4) - align(24 * Vl * 4)
        check(whole - chunked == want, f"{lay} tp rank {t} (V_l {Vl}): logits {chunked} B in chunks of 24 rows, "
              f"{whole} B in one chunk of {N}: {whole - chunked} B less (want {want})")
sys.exit(0 if ok else 1)
PY

# 4. GPT-2 124M, dry-run only
for tp in 1 2; do
  cat >"$T/gpt2-tp$tp.yaml" <<YAML
model: {preset: gpt2-124m}
train: {global_batch: 16, micro_batch: 16, precision: bf16}
parallel: {tp: $tp}
YAML
  "$DTRUN" --dry-run --format=json --hardware=h100-sxm --nproc-per-node=$tp "$T/gpt2-tp$tp.yaml" \
    >"$T/gpt2-tp$tp.dry.json" 2>"$T/gpt2-tp$tp.err" || { cat "$T/gpt2-tp$tp.err"; fail "gpt2-124m tp $tp: dry-run"; }
done
python3 - "$T" <<'PY' || fail "GPT-2's logits column is not one chunk"
import json, sys
T = sys.argv[1]
ok = True
N, C, V = 16 * 1024, 768, 50257
for tp in (1, 2):
    d = json.load(open(f"{T}/gpt2-tp{tp}.dry.json"))
    for t, m in enumerate(d["stages"][0]["memory_by_tp_rank"]):
        Vl = V * (t + 1) // tp - V * t // tp
        # every term is a whole number of 64-byte lines here
        want = 4 * (N * (C // 2 + 8) + 1024 * Vl)
        old = 4 * (N * (C // 2 + 8) + N * Vl)
        good = m["logits"] == want
        ok &= good
        print(("ok   " if good else "FAIL ") + f"gpt2-124m micro_batch 16 x 1024, tp {tp} rank {t}: logits column "
              f"{m['logits'] / 1e6:.1f} MB (want {want / 1e6:.1f}: N x (C / 2 + 8) + 1024 x {Vl} floats); the "
              f"unchunked head's {old / 1e9:.2f} GB")
sys.exit(0 if ok else 1)
PY

# 5. bad values
bad() { # WHAT YAML-LINES
  printf '%s\n' "$2" >"$T/bad.yaml"
  one_line_exit 2 "$1" --print-config "$T/bad.yaml"
}
bad "head_chunk_rows -1" "model: {kind: gpt, head_chunk_rows: -1}"
bad "head_chunk_rows on a ViT" "model: {kind: vit, head_chunk_rows: 64}"
bad "head_chunk_rows not a number" "model: {kind: gpt, head_chunk_rows: lots}"
echo "PASS head_chunks"
