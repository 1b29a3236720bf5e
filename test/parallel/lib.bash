# lib.bash — shared by test/integration/parallel_*.sh (not a test itself).
#
# A layout is a word list "dp=2 tp=2 pp=2 cp=2 ep=2 mode=fsdp sched=1f1b accum=2 nodes=2
# recompute=block bucket_mb=1 sp=1 prec=bf16 grad=fp32 reduce=bf16 offload=1
# attn=naive" (cp: parallel.cp, context parallel ranks, each holding 1 / cp of
# every sample; ep: parallel.ep, folded into dp x cp, adds no rank; attn:
# model.attention, fused when absent):
# missing keys mean dp/tp/pp 1, mode ddp, sched gpipe, no accumulation, one
# node, no recomputation, the default bucket, no sequence parallelism, fp32
# (prec: the train.precision; grad, reduce: train.grad_dtype and
# parallel.reduce_dtype, auto when absent), no offload (offload=1:
# train.offload: [optimizer]; offload=2: [optimizer, params]; offload=3:
# [activations]; offload=4: all three). layout_job writes the job file for one tiny
# model under that layout;
# run_layout trains it through bin/dtrun (the launcher, N workers) with
# DTRUN_DUMP_PARAMS and compares every step's loss and the final parameters with
# the single-process reference of the same model (compare.py), computing the
# same function: its precision, gradient type and attention kind (ref_words).
#
# Micro-batches. The global batch (8) is the same everywhere; only its split
# changes: with pp = 1, micro_batch = 8 / dp (or 8 / (dp * accum)); with pp > 1,
# m = min(8 / dp, 2 * pp) pipeline micro-batches (a multiple of pp, which
# interleaving needs). n_layer = max(2, pp * virtual stages), and each n_layer
# has its own single-process reference.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
DTRUN=${DTRUN_BIN:-$ROOT/bin/dtrun}   # DTRUN_BIN: another build of dtrun to test
[ -x "$DTRUN" ] || { echo "bin/dtrun is not built (make all)"; exit 1; }
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/dtrun-parallel.XXXXXX)
# only the main shell cleans up: a background job's forked shell killed before it
# execs (a watchdog we no longer need) would otherwise run this trap too
trap '[ "$BASHPID" = "$$" ] && rm -rf "$T"' EXIT
LOSS_RTOL=${LOSS_RTOL:-1e-5}
PARAM_ATOL=${PARAM_ATOL:-1e-4}
FAILS=0
RESULTS=$T/results.txt
: >"$RESULTS"

fail() { echo "FAIL: $*"; exit 1; }

# free_port: a TCP port free right now (for a second agent's rendezvous).
free_port() {
  python3 "$FREE_PORT_PY"
}
FREE_PORT_PY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../helpers/free_port.py

# one_line_exit STATUS WHAT ARGS...: `dtrun ARGS` (bad input to a
# subcommand) exits STATUS with exactly one line on stderr.
one_line_exit() {
  local want=$1 what=$2; shift 2
  "$DTRUN" "$@" >/dev/null 2>"$T/err"; local rc=$?
  [ $rc = "$want" ] || { cat "$T/err"; fail "$what: exit $rc, want $want"; }
  [ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err"; fail "$what: not one line"; }
  echo "ok: $what: exit $rc: $(cat "$T/err")"
}

# lget LAYOUT KEY DEFAULT
lget() {
  local w
  for w in $1; do [ "${w%%=*}" = "$2" ] && { echo "${w#*=}"; return; }; done
  echo "$3"
}

# layout_name LAYOUT: a file-name-safe tag.
layout_name() { echo "$1" | tr ' =' '_-'; }

# layout_layers LAYOUT
layout_layers() {
  local pp v
  pp=$(lget "$1" pp 1)
  v=1; [ "$(lget "$1" sched gpipe)" = interleaved ] && [ "$pp" -gt 1 ] && v=2
  local l=$((pp * v)); [ $l -lt 2 ] && l=2
  echo $l
}

# layout_job MODEL LAYOUT OUT.yaml METRICS.jsonl
layout_job() {
  local model=$1 lay=$2 out=$3 met=$4
  local dp tp pp mode sched accum gb=8 mb m L
  dp=$(lget "$lay" dp 1); tp=$(lget "$lay" tp 1); pp=$(lget "$lay" pp 1)
  mode=$(lget "$lay" mode ddp); sched=$(lget "$lay" sched gpipe); accum=$(lget "$lay" accum 1)
  L=$(layout_layers "$lay")
  if [ "$pp" -gt 1 ]; then
    m=$((gb / dp)); [ $m -gt $((2 * pp)) ] && m=$((2 * pp))
    m=$((m / pp * pp)); [ $m -lt 1 ] && m=1
    mb=$((gb / dp / m))
  else
    mb=$((gb / dp / accum))
  fi
  sed -e "s/^  n_layer: .*/  n_layer: $L/" "$ROOT/test/parallel/$model.yaml" >"$out"
  local attn; attn=$(lget "$lay" attn fused)
  [ "$attn" != fused ] && sed -i -e "s/^  n_layer: .*/&\n  attention: $attn/" "$out"
  sed -i -e "s/^  global_batch: .*/  global_batch: $gb\n  micro_batch: $mb/" "$out"
  local rc_kind; rc_kind=$(lget "$lay" recompute none)
  [ "$rc_kind" != none ] && sed -i -e "s/^  global_batch: .*/&\n  recompute: $rc_kind/" "$out"
  local prec grad; prec=$(lget "$lay" prec fp32); grad=$(lget "$lay" grad auto)
  [ "$prec" != fp32 ] && sed -i -e "s/^  global_batch: .*/&\n  precision: $prec/" "$out"
  [ "$grad" != auto ] && sed -i -e "s/^  global_batch: .*/&\n  grad_dtype: $grad/" "$out"
  case $(lget "$lay" offload 0) in
    1) sed -i -e "s/^  global_batch: .*/&\n  offload: [optimizer]/" "$out" ;;
    2) sed -i -e "s/^  global_batch: .*/&\n  offload: [optimizer, params]/" "$out" ;;
    3) sed -i -e "s/^  global_batch: .*/&\n  offload: [activations]/" "$out" ;;
    4) sed -i -e "s/^  global_batch: .*/&\n  offload: [optimizer, params, activations]/" "$out" ;;
  esac
  printf '  metrics: %s\nparallel:\n  dp: %s\n  tp: %s\n  pp: %s\n  mode: %s\n' "$met" "$dp" "$tp" "$pp" "$mode" >>"$out"
  [ "$pp" -gt 1 ] && printf '  pp_schedule: %s\n' "$sched" >>"$out"
  [ "$(lget "$lay" sp 0)" = 1 ] && printf '  sequence_parallel: true\n' >>"$out"
  [ "$(lget "$lay" cp 1)" != 1 ] && printf '  cp: %s\n' "$(lget "$lay" cp 1)" >>"$out"
  [ "$(lget "$lay" ep 1)" != 1 ] && printf '  ep: %s\n' "$(lget "$lay" ep 1)" >>"$out"
  local bucket; bucket=$(lget "$lay" bucket_mb "")
  [ -n "$bucket" ] && printf '  bucket_mb: %s\n' "$bucket" >>"$out"
  local reduce; reduce=$(lget "$lay" reduce auto)
  [ "$reduce" != auto ] && printf '  reduce_dtype: %s\n' "$reduce" >>"$out"
  return 0
}

# reference MODEL LAYERS: the single-process run (once per model and depth).
# reference MODEL L [PRECISION WORDS]: the single-process run of n_layer L (with
# the layout's prec= and grad= words, when given).
reference() {
  local model=$1 L=$2 pw=${3:-} d=$T/ref-$1-$2
  [ -n "$pw" ] && d=$d-$(layout_name "$pw")
  [ -f "$d.bin" ] && return 0
  layout_job "$model" "pp=1 $pw" "$d.yaml" "$d.jsonl"
  sed -i -e "s/^  n_layer: .*/  n_layer: $L/" "$d.yaml"
  DTRUN_DUMP_PARAMS=$d.bin "$DTRUN" worker "$d.yaml" >"$d.log" 2>&1 ||
    { cat "$d.log"; fail "$model reference (n_layer $L) did not train"; }
}

# The words of a layout its single-process reference shares: precision,
# gradient type and attention kind ("" for fp32 fused layouts, so their
# references keep their names).
ref_words() {
  local w out=""
  for w in $1; do case ${w%%=*} in prec | grad | attn) out="$out${out:+ }$w" ;; esac; done
  echo "$out"
}

# run_layout MODEL LAYOUT: trains the layout, compares with the reference.
# Records "MODEL LAYOUT: max_rel_loss=.. max_param_diff=.." in $RESULTS; a
# failure counts in FAILS (the caller decides when to stop).
run_layout() {
  local model=$1 lay=$2 L dp tp pp nodes world name d rc pw ref
  pw=$(ref_words "$lay")
  L=$(layout_layers "$lay"); reference "$model" "$L" "$pw"
  ref=$T/ref-$model-$L; [ -n "$pw" ] && ref=$ref-$(layout_name "$pw")
  dp=$(lget "$lay" dp 1); tp=$(lget "$lay" tp 1); pp=$(lget "$lay" pp 1); nodes=$(lget "$lay" nodes 1)
  world=$((dp * tp * pp * $(lget "$lay" cp 1)))
  name=$model-$(layout_name "$lay"); d=$T/$name
  layout_job "$model" "$lay" "$d.yaml" "$d.jsonl"
  if [ "$nodes" -gt 1 ]; then
    # two agents on this machine as two nodes: HSDP's groups really span "nodes"
    local port per=$((world / nodes)) pids=() i
    port=$(free_port)
    for ((i = 0; i < nodes; i++)); do
      DTRUN_DUMP_PARAMS=$d.bin timeout -k 5 120 "$DTRUN" --nnodes=$nodes --nproc-per-node=$per \
        --rdzv-endpoint=127.0.0.1:$port --rdzv-id=$name --node-rank=$i "$d.yaml" >"$d.node$i.log" 2>&1 &
      pids+=($!)
    done
    rc=0
    for i in "${pids[@]}"; do wait "$i" || rc=$?; done
    cat "$d".node*.log >"$d.log"
  else
    DTRUN_DUMP_PARAMS=$d.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=$world "$d.yaml" >"$d.log" 2>&1
    rc=$?
  fi
  if [ $rc -ne 0 ]; then
    echo "FAIL $model [$lay]: exit $rc"; tail -n 8 "$d.log" | sed 's/^/    /'
    FAILS=$((FAILS + 1)); return 1
  fi
  local out
  if out=$(python3 "$ROOT/test/parallel/compare.py" "$ref.jsonl" "$ref.bin" \
           "$d.jsonl" "$d.bin" "$LOSS_RTOL" "$PARAM_ATOL" 2>&1); then
    echo "ok   $model [$lay]: ${out##*$'\n'}"
    echo "$model [$lay]: ${out##*$'\n'}" >>"$RESULTS"
  else
    echo "FAIL $model [$lay]:"; echo "$out" | sed 's/^/    /'
    FAILS=$((FAILS + 1)); return 1
  fi
}

# summary: worst loss / parameter difference over the recorded layouts.
summary() {
  python3 - "$RESULTS" <<'EOF'
import re, sys
rows = [l for l in open(sys.argv[1]) if "max_rel_loss" in l]
if rows:
    rl = max(float(re.search(r"max_rel_loss=(\S+)", l).group(1)) for l in rows)
    pd = max(float(re.search(r"max_param_diff=(\S+)", l).group(1)) for l in rows)
    print(f"{len(rows)} layouts equal to one process: worst relative loss diff {rl:.3g}, worst parameter diff {pd:.3g}")
EOF
}
