# ckpt.bash — shared by test/integration/ckpt_*.sh (not a test itself), on top
# of lib.bash (layouts, the single-process reference, compare.py).
#
# The runs here are 40 steps of the tiny models with a checkpoint directory;
# an interrupted run stops after step 20 (DTRUN_TEST_STOP_STEP: save, exit 0,
# exactly what SIGUSR1 does) and is resumed by running the same job again, or a
# job of another layout pointed at the first one's checkpoint.
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
STEPS=${STEPS:-40}

# ckpt_job MODEL LAYOUT OUT.yaml METRICS.jsonl CKPT_DIR [RESUME]: layout_job
# with STEPS steps and a checkpoint section.
ckpt_job() {
  layout_job "$1" "$2" "$3" "$4"
  sed -i -e "s/^  steps: .*/  steps: $STEPS/" "$3"
  printf 'checkpoint:\n  dir: %s\n  keep: 3\n' "$5" >>"$3"
  [ -n "${6:-}" ] && printf '  resume: %s\n' "$6" >>"$3"
  return 0
}

# ckpt_reference MODEL LAYERS: the uninterrupted single-process run of STEPS
# steps ($T/cref-MODEL-LAYERS.{jsonl,bin}).
ckpt_reference() {
  local d=$T/cref-$1-$2
  [ -f "$d.bin" ] && return 0
  layout_job "$1" "pp=1" "$d.yaml" "$d.jsonl"
  sed -i -e "s/^  n_layer: .*/  n_layer: $2/" -e "s/^  steps: .*/  steps: $STEPS/" "$d.yaml"
  DTRUN_DUMP_PARAMS=$d.bin "$DTRUN" worker "$d.yaml" >"$d.log" 2>&1 ||
    { cat "$d.log"; fail "$1 reference (n_layer $2) did not train"; }
}

# ckpt_run LAYOUT JOB.yaml LOG [ENV=V...]: dtrun with as many workers as the
# layout has ranks; returns dtrun's status.
ckpt_run() {
  local lay=$1 job=$2 log=$3 world; shift 3
  world=$(( $(lget "$lay" dp 1) * $(lget "$lay" tp 1) * $(lget "$lay" pp 1) * $(lget "$lay" cp 1) ))
  env "$@" timeout -k 5 120 "$DTRUN" --nproc-per-node=$world "$job" >"$log" 2>&1
}

# same_losses A.jsonl B.jsonl: every step's loss and val_loss identical (the
# last line of a step counts: a resumed run appends to its metrics file).
same_losses() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
def read(p):
    out = {}
    for line in open(p):
        o = json.loads(line)
        for k in ("loss", "val_loss"):
            if k in o:
                out[(k, o["step"])] = o[k]
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
if a != b:
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    sys.exit(f"losses differ at {diff[:5]}: {[(a.get(k), b.get(k)) for k in diff[:5]]}")
print(f"{len(a)} losses identical")
EOF
}

# ckpt_exact MODEL LAYOUT: 40 steps in one go and as 20 + 20 with a stop and
# a resume under the same layout: the final parameters and the checkpoint's
# loss tail must be bitwise equal.
ckpt_exact() {
  local model=$1 lay=$2 name d
  name=exact-$model-$(layout_name "$lay"); d=$T/$name
  ckpt_job "$model" "$lay" "$d-a.yaml" "$d-a.jsonl" "$d-a.ck"
  ckpt_job "$model" "$lay" "$d-b.yaml" "$d-b.jsonl" "$d-b.ck"
  ckpt_run "$lay" "$d-a.yaml" "$d-a.log" DTRUN_DUMP_PARAMS="$d-a.bin" || { tail "$d-a.log"; fail "$name: one go"; }
  ckpt_run "$lay" "$d-b.yaml" "$d-b1.log" DTRUN_TEST_STOP_STEP=20 || { tail "$d-b1.log"; fail "$name: first half"; }
  grep -q "stopped at step 20 with a checkpoint" "$d-b1.log" || { tail "$d-b1.log"; fail "$name: no stop at step 20"; }
  [ "$(cat "$d-b.ck/latest")" = step_000020 ] || fail "$name: latest is $(cat "$d-b.ck/latest"), want step_000020"
  ckpt_run "$lay" "$d-b.yaml" "$d-b2.log" DTRUN_DUMP_PARAMS="$d-b.bin" || { tail "$d-b2.log"; fail "$name: resumed half"; }
  grep -q "resuming from $d-b.ck/step_000020: step 20" "$d-b2.log" || { tail "$d-b2.log"; fail "$name: did not resume"; }
  cmp -s "$d-a.bin" "$d-b.bin" || fail "$name: final parameters differ between one go and 20 + resume + 20"
  local out
  out=$(same_losses "$d-a.jsonl" "$d-b.jsonl") || fail "$name: $out"
  python3 - "$d-a.ck/step_000040/index.json" "$d-b.ck/step_000040/index.json" <<'EOF' || fail "$name: loss tails differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["loss_tail"] == b["loss_tail"] and len(a["loss_tail"]) == 16, (a["loss_tail"], b["loss_tail"])
assert a["step"] == b["step"] == 40 and a["optim_step"] == b["optim_step"] == 40
EOF
  echo "ok   exact $model [$lay]: parameters bitwise equal, $out, loss tail equal"
}

# reshard MODEL LAYOUT_A LAYOUT_B: the first 20 steps under layout A, the
# last 20 under B from A's checkpoint; the whole run must be the
# single-process run within the layout tolerance (LOSS_RTOL, PARAM_ATOL).
reshard() {
  local model=$1 la=$2 lb=$3 name d L
  L=$(layout_layers "$la"); [ "$(layout_layers "$lb")" = "$L" ] || fail "layouts with different depths"
  ckpt_reference "$model" "$L"
  name=reshard-$model-$(layout_name "$la")-to-$(layout_name "$lb"); d=$T/$name
  ckpt_job "$model" "$la" "$d-a.yaml" "$d.jsonl" "$d-a.ck"
  ckpt_job "$model" "$lb" "$d-b.yaml" "$d.jsonl" "$d-b.ck" "$d-a.ck"
  ckpt_run "$la" "$d-a.yaml" "$d-a.log" DTRUN_TEST_STOP_STEP=20 || { tail "$d-a.log"; fail "$name: first half"; }
  ckpt_run "$lb" "$d-b.yaml" "$d-b.log" DTRUN_DUMP_PARAMS="$d.bin" || { tail "$d-b.log"; fail "$name: second half"; }
  grep -q "resuming from $d-a.ck/step_000020: step 20" "$d-b.log" || { tail "$d-b.log"; fail "$name: did not resume"; }
  local out
  out=$(python3 "$ROOT/test/parallel/compare.py" "$T/cref-$model-$L.jsonl" "$T/cref-$model-$L.bin" "$d.jsonl" \
        "$d.bin" "$LOSS_RTOL" "$PARAM_ATOL" 2>&1) || { echo "$out"; fail "$name: off the single-process curve"; }
  echo "ok   reshard $model [$la] -> [$lb]: ${out##*$'\n'}"
}

# last_step METRICS: the last step the current attempt logged (0 before any)
last_step() {
  local s
  s=$(grep '"loss"' "$1" 2>/dev/null | tail -1 | sed -n 's/^{"step":\([0-9]*\),.*/\1/p')
  echo "${s:-0}"
}

# wait_step METRICS STEP SECONDS: until the run logged STEP (1 after SECONDS)
wait_step() {
  local i
  for ((i = 0; i < $3 * 50; i++)); do [ "$(last_step "$1")" -ge "$2" ] && return 0; sleep 0.02; done
  return 1
}
