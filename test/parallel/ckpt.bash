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
  world=$(( $(lget "$lay" dp 1) * $(lget "$lay" tp 1) * $(lget "$lay" pp 1) ))
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
