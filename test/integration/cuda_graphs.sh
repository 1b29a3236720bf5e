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
# 5. Refusals, one line and exit 2 at load (FILE:LINE:COL): parallel.pp 2,
#    train.offload. (What the worker refuses at set-up on the cuda backend —
#    several ranks on the CPU transport, HSDP's converted cross-node
#    all-reduce — cannot happen on the CPU backend, which records nothing:
#    unit/test_graphs checks those lines.)
# 6. Several processes through the launcher, graphs on against off, the same
#    checks as 1 (every step's loss, gradient norm and validation loss equal
#    to the printed digits on rank 0, the final parameters bit for bit, with
#    clipping active so the norm's bits reach the parameters): DDP with
#    accumulation, ZeRO-1, ZeRO-2, FSDP (GPT and ViT), HSDP over two agents
#    as two nodes, tp 2 with sequence parallelism and with tp_overlap, cp 2,
#    dp 2 x tp 2, bf16 with bf16 reductions (DDP's bucket buffer converts),
#    FSDP with bf16 reductions of fp32 gradients; a NaN skipped under ZeRO-2;
#    parallel.dp: auto on 2 workers.
# 7. A peer killed in the middle of training (DDP on 2 ranks, FSDP on 4):
#    every survivor exits 4 with one line naming its rank and step.
# What this cannot show: that a CUDA graph replays the step, or that NCCL's
# collectives are recorded and replayed (no GPU here); test/gpu/test_graphs.c
# (one process) and test/gpu/graphs_ranks.sh (two GPUs, NCCL) do that on a
# GPU machine, graphs on against off.
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
# nan_pair NAME LAYOUT RUNNER...: graphs off and on, a NaN loss at step 5
# with skip_nonfinite, run by RUNNER NAME-off|NAME-on; the step is skipped.
nan_pair() {
  local name=$1 lay=$2 g; shift 2
  for g in off on; do
    graphs_job gpt-tiny "$lay" "$name-$g" $g
    sed -i -e "s/^  global_batch: .*/&\n  skip_nonfinite: true/" "$T/$name-$g.yaml"
    "$@" "$name-$g" || { tail "$T/$name-$g.log"; fail "$name $g: did not train"; }
    grep -q 'step 5: the loss is nan.*skipping the step' "$T/$name-$g.log" ||
      { tail "$T/$name-$g.log"; fail "$name $g: step 5 not skipped"; }
  done
}
nan_one() { train "$1" DTRUN_TEST_NAN_STEP=5; }
nan_pair nan "" nan_one
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
refuse "pp 2" 's/^  pp: 1/  pp: 2/'
grep -q 'set parallel.pp: 1' "$T/err" || fail "pp 2: the line does not say what to set"
refuse "offload" 's/^  global_batch: .*/&\n  offload: [optimizer]/'

# 6. several processes: the launcher's workers, graphs on against off
# launch NAME WORLD NODES: $T/NAME.yaml on WORLD workers (NODES agents on this
# machine as nodes), parameters dumped to $T/NAME.bin.
launch() {
  local name=$1 world=$2 nodes=$3
  if [ "$nodes" -gt 1 ]; then
    local port i pids=() rc=0
    port=$(free_port)
    for ((i = 0; i < nodes; i++)); do
      DTRUN_DUMP_PARAMS=$T/$name.bin timeout -k 5 120 "$DTRUN" --nnodes=$nodes --nproc-per-node=$((world / nodes)) \
        --rdzv-endpoint=127.0.0.1:$port --rdzv-id=$name --node-rank=$i "$T/$name.yaml" >"$T/$name.node$i.log" 2>&1 &
      pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=$?; done
    cat "$T/$name".node*.log >"$T/$name.log"
    return $rc
  fi
  env "${@:4}" DTRUN_DUMP_PARAMS="$T/$name.bin" timeout -k 5 120 "$DTRUN" --nproc-per-node="$world" "$T/$name.yaml" \
    >"$T/$name.log" 2>&1
}

# same_records OFF.jsonl ON.jsonl: every record's loss, grad_norm and
# val_loss equal as printed (rank 0's metrics).
same_records() {
  python3 - "$1" "$2" <<'EOF_PY'
import json, sys
rows = [[json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3]]
keys = ("step", "loss", "grad_norm", "val_loss")
pick = lambda rs: [{k: r[k] for k in keys if k in r} for r in rs if "loss" in r or "val_loss" in r]
a, b = pick(rows[0]), pick(rows[1])
if not a or a != b:
    bad = next((x, y) for x, y in zip(a + [None], b + [None]) if x != y)
    sys.exit(f"records differ: off {bad[0]} on {bad[1]}")
print(f"{sum('loss' in r for r in a)} steps, {sum('val_loss' in r for r in a)} evaluations")
EOF_PY
}

# ranks_same MODEL LAYOUT [EXTRA-PARALLEL-LINE]: the layout (lib.bash words)
# on its workers, graphs off and on.
ranks_same() {
  local model=$1 lay=$2 extra=${3:-} tag world nodes out g
  tag=ranks-$model-$(layout_name "$lay")${extra:+-x}
  world=$(( $(lget "$lay" dp 1) * $(lget "$lay" tp 1) * $(lget "$lay" cp 1) ))
  nodes=$(lget "$lay" nodes 1)
  for g in off on; do
    graphs_job "$model" "$lay" "$tag-$g" $g
    [ -n "$extra" ] && printf '  %s\n' "$extra" >>"$T/$tag-$g.yaml"
    launch "$tag-$g" "$world" "$nodes" || { tail -n 8 "$T/$tag-$g.log"; fail "$tag: did not train with cuda_graphs $g"; }
  done
  grep -q '"val_loss"' "$T/$tag-on.jsonl" || fail "$tag: no evaluation between steps"
  out=$(same_records "$T/$tag-off.jsonl" "$T/$tag-on.jsonl" 2>&1) || { echo "$out"; fail "$tag: cuda_graphs changes the run"; }
  cmp -s "$T/$tag-off.bin" "$T/$tag-on.bin" || fail "$tag: parameters differ"
  echo "ok   $model [$lay${extra:+ $extra}] on $world workers: cuda_graphs on = off: $out, parameters bit for bit"
}
ranks_same gpt-tiny "dp=2 accum=2"
ranks_same gpt-tiny "dp=2 mode=zero1"
ranks_same gpt-tiny "dp=2 mode=zero2 bucket_mb=1"
ranks_same gpt-tiny "dp=2 mode=fsdp accum=2"
ranks_same vit-tiny "dp=2 mode=fsdp"
ranks_same gpt-tiny "dp=4 mode=hsdp nodes=2"
ranks_same gpt-tiny "tp=2 sp=1"
ranks_same gpt-tiny "tp=2" "tp_overlap: true"
ranks_same gpt-tiny "cp=2"
ranks_same gpt-tiny "dp=2 tp=2 mode=zero2"
ranks_same gpt-bf16 "dp=2 prec=bf16 reduce=bf16 accum=2"
ranks_same gpt-bf16 "dp=2 mode=fsdp prec=bf16 grad=fp32 reduce=bf16"

# a non-finite loss on 2 ranks: skipped alike (the update phase runs on no rank)
nan_two() { launch "$1" 2 1 DTRUN_TEST_NAN_STEP=5; }
nan_pair rnan "dp=2 mode=zero2" nan_two
out=$(same_records "$T/rnan-off.jsonl" "$T/rnan-on.jsonl" 2>&1) || { echo "$out"; fail "zero2 skip_nonfinite: cuda_graphs skips differently"; }
cmp -s "$T/rnan-off.bin" "$T/rnan-on.bin" || fail "zero2 skip_nonfinite: parameters differ"
echo "ok   zero2 on 2 workers, a NaN loss at step 5 skipped: the same run with cuda_graphs: $out"

# dp: auto resolves to the workers started, and the step records with them
graphs_job gpt-tiny "" auto on
sed -i -e 's/^  dp: 1/  dp: auto/' -e 's/^  micro_batch: 8/  micro_batch: 4/' "$T/auto.yaml"
launch auto 2 1 || { tail "$T/auto.log"; fail "dp: auto on 2 workers with cuda_graphs did not train"; }
grep -q 'layout dp=2 ' "$T/auto.log" || { tail "$T/auto.log"; fail "dp: auto did not resolve to 2"; }
echo "ok   dp: auto on 2 workers with cuda_graphs trains (dp=2)"

# 7. a peer dies in the middle of training with cuda_graphs: every survivor
# stops with exit 4 and one line naming its rank and step (a failure inside
# a phase still waits for what is in flight before the phase ends; on the
# CPU nothing is recorded, so this checks the restructured step's paths)
peer_dies() { # NAME LAYOUT VICTIM
  local name=$1 lay=$2 victim=$3 world r rc dog lines pids=()
  world=$(( $(lget "$lay" dp 1) * $(lget "$lay" tp 1) ))
  graphs_job gpt-tiny "$lay" "$name" on
  sed -i -e 's/^  steps: .*/  steps: 100000/' -e '/^  eval_every: /d' "$T/$name.yaml"
  mkdir -p "$T/$name.store"
  for ((r = 0; r < world; r++)); do
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world DTRUN_STORE=file:$T/$name.store \
      DTRUN_COMM_TIMEOUT=30 "$DTRUN" worker "$T/$name.yaml" >"$T/$name.$r.out" 2>"$T/$name.$r.err" &
    pids+=($!)
  done
  for _ in $(seq 1 200); do [ -s "$T/$name.jsonl" ] && break; sleep 0.05; done
  [ -s "$T/$name.jsonl" ] || { cat "$T/$name".*.err; fail "$name: training did not start"; }
  sleep 0.3
  kill -9 "${pids[$victim]}"
  for ((r = 0; r < world; r++)); do
    [ $r -eq "$victim" ] && { wait "${pids[$r]}" 2>/dev/null; continue; }
    rc=0
    bash -c 'sleep 40; kill -9 "$1"' watchdog "${pids[$r]}" >/dev/null 2>&1 &
    dog=$!
    wait "${pids[$r]}" || rc=$?
    { kill -9 "$dog"; wait "$dog"; } 2>/dev/null
    [ $rc -eq 4 ] || { cat "$T/$name.$r.err"; fail "$name: rank $r exited $rc, want 4 (communication error)"; }
    lines=$(grep -v '^dtrun: layout ' "$T/$name.$r.err" | grep -c .)
    [ "$lines" = 1 ] || { cat "$T/$name.$r.err"; fail "$name: rank $r printed $lines lines, want one"; }
    grep -Eq "^dtrun: rank $r: step [0-9]+" "$T/$name.$r.err" ||
      { cat "$T/$name.$r.err"; fail "$name: rank $r's line does not name its rank and step"; }
  done
  echo "ok   $name [$lay] with cuda_graphs, rank $victim killed: survivors exit 4: $(grep -hv '^dtrun: layout' "$T/$name".*.err | head -1)"
}
peer_dies dies-ddp "dp=2" 1
peer_dies dies-fsdp "dp=4 mode=fsdp" 2
echo "PASS"
