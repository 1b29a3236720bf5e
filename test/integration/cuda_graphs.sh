#!/usr/bin/env bash
# train.cuda_graphs (issue 14), through bin/dtrun on the CPU backend, where
# nothing is recorded and every step issues the restructured step's ops (the
# loss, the gradient norm, the clipping factor and AdamW's lr and t in ops
# memory, the inputs of every micro-batch in fixed buffers:
# runtime/worker/engine_graph.c). What a CUDA graph replays is that step, so
# here it must be the step without the key, bit for bit:
#
# 1. The same run. GPT (2 micro-batches accumulated, clipping active) and ViT
#    in fp32, GPT in bf16 with bf16 and with fp32 gradients, GPT with block
#    recompute: every step's loss and validation loss equal to the printed
#    digits, the final parameters equal bit for bit (compare.py with both
#    tolerances 0), with an evaluation between steps (eval_every 5).
# 2. A non-finite loss (DTRUN_TEST_NAN_STEP=5): with train.skip_nonfinite the
#    step is skipped the same way (the update phase is not run), the rest of
#    the run the same bits; without it the run stops with exit 5 as before.
# 3. A run stopped at step 10 with a checkpoint and resumed (a fresh process,
#    its own warm-up step) ends with the uninterrupted run's parameters.
# 4. Memory: the step's device buffers (every micro-batch's inputs and the
#    scalars, sizes_graph_bytes) are what the dry-run adds to the workspace,
#    and the measured activations equal the dry-run's to the byte.
# 5. Refusals, one line and exit 2 at load (FILE:LINE:COL): parallel.dp 2,
#    tp 2, pp 2, cp 2, train.offload; parallel.dp: auto launched on 2
#    workers is refused by the launcher before it spawns.
# What this cannot show: that a CUDA graph replays the step (no GPU here);
# test/gpu/test_graphs.c does that on a GPU, graphs on against off.
source "$(dirname "$0")/../parallel/lib.bash"

# graphs_job MODEL LAYOUT NAME [on|off]: layout_job's file with train.cuda_graphs and an evaluation every 5 steps.
graphs_job() {
  local f=$T/$3.yaml
  layout_job "$1" "$2" "$f" "$T/$3.jsonl"
  sed -i -e "s/^  global_batch: .*/&\n  eval_every: 5/" "$f"
  [ "${4:-on}" = on ] && sed -i -e "s/^  global_batch: .*/&\n  cuda_graphs: true/" "$f"
  return 0
}

# train NAME [VAR=VALUE...]: one process, parameters dumped to $T/NAME.bin.
train() {
  local name=$1; shift
  env "$@" DTRUN_DUMP_PARAMS="$T/$name.bin" "$DTRUN" worker "$T/$name.yaml" >"$T/$name.log" 2>&1
}

same_run() { # MODEL LAYOUT
  local tag; tag=$1-$(layout_name "${2:-fp32}")
  graphs_job "$1" "$2" "$tag-off" off
  graphs_job "$1" "$2" "$tag-on" on
  train "$tag-off" || { tail "$T/$tag-off.log"; fail "$tag: did not train without cuda_graphs"; }
  train "$tag-on" || { tail "$T/$tag-on.log"; fail "$tag: did not train with cuda_graphs"; }
  grep -q '"val_loss"' "$T/$tag-on.jsonl" || fail "$tag: no evaluation between steps"
  local out
  out=$(python3 "$ROOT/test/parallel/compare.py" "$T/$tag-off.jsonl" "$T/$tag-off.bin" "$T/$tag-on.jsonl" \
        "$T/$tag-on.bin" 0 0 2>&1) || { echo "$out"; fail "$tag: cuda_graphs changes the run"; }
  cmp -s "$T/$tag-off.bin" "$T/$tag-on.bin" || fail "$tag: parameters differ"
  echo "ok   $tag: cuda_graphs on = off: ${out##*$'\n'}"
}
same_run gpt-tiny "accum=2"
same_run vit-tiny ""
same_run gpt-bf16 "prec=bf16"
same_run gpt-bf16 "prec=bf16 grad=fp32 accum=2"
same_run gpt-tiny "recompute=block"

# 2. a non-finite loss, skipped and not
for g in off on; do
  graphs_job gpt-tiny "" "nan-$g" $g
  sed -i -e "s/^  global_batch: .*/&\n  skip_nonfinite: true/" "$T/nan-$g.yaml"
  train "nan-$g" DTRUN_TEST_NAN_STEP=5 || { tail "$T/nan-$g.log"; fail "nan $g: did not train"; }
  grep -q 'step 5: the loss is nan.*skipping the step' "$T/nan-$g.log" || { tail "$T/nan-$g.log"; fail "nan $g: step 5 not skipped"; }
done
out=$(python3 "$ROOT/test/parallel/compare.py" "$T/nan-off.jsonl" "$T/nan-off.bin" "$T/nan-on.jsonl" "$T/nan-on.bin" 0 0 2>&1) ||
  { echo "$out"; fail "skip_nonfinite: cuda_graphs skips differently"; }
echo "ok   a NaN loss at step 5 with skip_nonfinite: the same run with cuda_graphs: ${out##*$'\n'}"
graphs_job gpt-tiny "" nan-stop on
train nan-stop DTRUN_TEST_NAN_STEP=5; rc=$?
[ $rc = 5 ] || { tail "$T/nan-stop.log"; fail "a NaN loss without skip_nonfinite: exit $rc, want 5"; }
echo "ok   a NaN loss without skip_nonfinite stops with exit 5"

# 3. stopped at step 10 with a checkpoint, resumed by the same command
graphs_job gpt-tiny "accum=2" ck-once on
graphs_job gpt-tiny "accum=2" ck-two on
printf 'checkpoint:\n  dir: %s\n' "$T/ck" >>"$T/ck-two.yaml"
train ck-once || fail "checkpoint: the run in one go did not train"
train ck-two DTRUN_TEST_STOP_STEP=10 || { tail "$T/ck-two.log"; fail "checkpoint: the first half"; }
train ck-two || { tail "$T/ck-two.log"; fail "checkpoint: the resumed half"; }
grep -q 'resuming from .*step_000010' "$T/ck-two.log" || { tail "$T/ck-two.log"; fail "checkpoint: did not resume"; }
cmp -s "$T/ck-once.bin" "$T/ck-two.bin" || fail "checkpoint: 10 + resume + 10 steps differ from 20 in one go"
echo "ok   stopped at step 10 and resumed (a fresh warm-up): the parameters of the run in one go, bit for bit"

# 4. memory: measured = dry-run, and the difference is the step's buffers
source "$ROOT/test/parallel/pvm.bash"
BUSY=1
NAMES=()
for lay in "m=2" "kind=vit m=2"; do
  for g in off on; do
    name=mem-$(layout_name "$lay")-$g
    pvm_job "$name" "$lay"
    [ $g = on ] && sed -i -e "s/^  threads: 1/&\n  cuda_graphs: true/" "$T/$name.yaml"
    timeout -k 5 120 "$DTRUN" worker "$T/$name.yaml" >"$T/$name.log" 2>&1 || { tail "$T/$name.log"; fail "$name did not train"; }
    "$DTRUN" --dry-run --format=json --hardware=cpu "$T/$name.yaml" >"$T/$name.dry.json" 2>"$T/$name.dry.err" ||
      { cat "$T/$name.dry.err"; fail "$name: dry-run failed"; }
  done
done
python3 - "$T" <<'EOF_PY' || fail "the step's buffers are not what the dry-run says"
import json, sys
d = sys.argv[1]
ok = True
def peak(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.rank0.jsonl") if l.strip()]
    return rows[-1]["mem_peak"]
def dry(name):
    m = json.load(open(f"{d}/{name}.dry.json"))["stages"][0]["memory_by_tp_rank"][0]
    return m["activations"] + m["logits"] + m["workspace"], m["allocated"]
# the buffers: every micro-batch's inputs (2 micro-batches of 2 samples) + 64 bytes of scalars
want = {"m-2": 2 * 2 * 2 * 32 * 4 + 64, "kind-vit_m-2": 2 * 2 * (16 * 16 * 4 + 4) + 64}
for lay, extra in want.items():
    for g in ("off", "on"):
        name = f"mem-{lay}-{g}"
        p, (acts, total) = peak(name), dry(name)
        good = p["activations"] == acts and p["total"] == total
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {name}: activations {p['activations']} bytes, dry-run {acts}; "
              f"total {p['total']}, dry-run {total}")
    got = peak(f"mem-{lay}-on")["activations"] - peak(f"mem-{lay}-off")["activations"]
    good = got == extra
    ok &= good
    print(f"{'ok  ' if good else 'FAIL'} {lay}: cuda_graphs adds {got} bytes, the inputs and scalars: {extra}")
sys.exit(0 if ok else 1)
EOF_PY

# 5. refusals
refuse() { # WHAT SED-EXPRESSION
  graphs_job gpt-tiny "accum=2" "bad" on
  sed -i -e "$2" "$T/bad.yaml"
  one_line_exit 2 "$1" --dry-run "$T/bad.yaml"
  grep -q 'cuda_graphs' "$T/err" || fail "$1: the line does not name train.cuda_graphs"
  grep -q "^dtrun: $T/bad.yaml:[0-9]*:[0-9]*: " "$T/err" || fail "$1: the line does not say where"
}
refuse "dp 2" 's/^  dp: 1/  dp: 2/'
refuse "tp 2" 's/^  tp: 1/  tp: 2/'
refuse "pp 2" 's/^  pp: 1/  pp: 2/'
refuse "cp 2" 's/^  mode: none/&\n  cp: 2/'
refuse "offload" 's/^  global_batch: .*/&\n  offload: [optimizer]/'
graphs_job gpt-tiny "" auto on
sed -i -e 's/^  dp: 1/  dp: auto/' -e 's/^  micro_batch: 8/  micro_batch: 4/' "$T/auto.yaml"
one_line_exit 2 "dp: auto on 2 workers" --nproc-per-node=2 "$T/auto.yaml"
grep -q 'parallel.dp is 2 (auto' "$T/err" || fail "dp: auto: the line does not say dp resolved to 2"
echo "PASS"
