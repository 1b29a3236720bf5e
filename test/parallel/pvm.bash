# pvm.bash — measured runs against their dry-run (plan_vs_measured.sh,
# pp_zero_bubble.sh; not a test itself). Needs lib.bash sourced first; the
# caller sets BUSY (the share of a core other processes may take before a
# bubble run is repeated) and collects the measured names in NAMES.

# pvm_job NAME LAYOUT: the job file $T/NAME.yaml. LAYOUT words (lib.bash style):
# kind=gpt|vit dp tp pp mode sched m (pipeline micro-batches, or gradient
# accumulation with pp = 1: global_batch = mb x dp x m) mb (samples per micro-batch) steps recompute,
# d (d_model) seq (GPT sequence length) sp (1: sequence parallel) vocab (GPT
# vocab_size, default 64; 67 splits unevenly over tp, so the tp ranks differ)
# attn (model.attention, default fused) prec (train.precision, default fp32).
pvm_job() {
  local name=$1 lay=$2 kind dp tp pp mode sched m mb steps rc d seq vocab
  kind=$(lget "$lay" kind gpt); dp=$(lget "$lay" dp 1); tp=$(lget "$lay" tp 1); pp=$(lget "$lay" pp 1)
  mode=$(lget "$lay" mode ddp); sched=$(lget "$lay" sched 1f1b); m=$(lget "$lay" m 1)
  mb=$(lget "$lay" mb 2); steps=$(lget "$lay" steps 3); rc=$(lget "$lay" recompute none)
  d=$(lget "$lay" d 64); seq=$(lget "$lay" seq 32); vocab=$(lget "$lay" vocab 64)
  {
    printf 'model:\n  kind: %s\n  n_layer: 4\n  n_head: 4\n  d_model: %s\n' "$kind" "$d"
    printf '  attention: %s\n' "$(lget "$lay" attn fused)"
    if [ "$kind" = gpt ]; then printf '  vocab_size: %s\n  seq_len: %s\n' "$vocab" "$seq"
    else printf '  image_size: 16\n  patch_size: 4\n  channels: 1\n  n_classes: 10\n'; fi
    printf 'data:\n  kind: synthetic\n'
    printf 'train:\n  steps: %s\n  global_batch: %s\n  micro_batch: %s\n' "$steps" $((mb * dp * m)) "$mb"
    printf '  recompute: %s\n  lr: 3.0e-3\n  eval_batches: 1\n  seed: 7\n  threads: 1\n' "$rc"
    printf '  precision: %s\n' "$(lget "$lay" prec fp32)"
    printf 'log:\n  progress: off\n  metrics: %s\n' "$T/$name.jsonl"
    printf 'parallel:\n  dp: %s\n  tp: %s\n  pp: %s\n  mode: %s\n' "$dp" "$tp" "$pp" "$mode"
    [ "$pp" -gt 1 ] && printf '  pp_schedule: %s\n  microbatches: %s\n' "$sched" "$m"
    [ "$sched" = interleaved ] && printf '  virtual_stages: 2\n'
    [ "$(lget "$lay" sp 0)" = 1 ] && printf '  sequence_parallel: true\n'
  } >"$T/$name.yaml"
}

# measure NAME LAYOUT: train it and dry-run it on the same machine shape. The
# runs whose bubble is checked go through cpu_share.py, which records how much
# CPU other processes took meanwhile; a run that did not have its cores is
# repeated (up to 3 times): the bubble is measured on a core per rank.
measure() {
  local name=$1 lay=$2 world try
  world=$(( $(lget "$lay" dp 1) * $(lget "$lay" tp 1) * $(lget "$lay" pp 1) ))
  pvm_job "$name" "$lay"
  for try in 1 2 3; do
    python3 "$ROOT/test/parallel/cpu_share.py" "$T/$name.cpu.json" -- \
      timeout -k 5 120 "$DTRUN" --nproc-per-node="$world" "$T/$name.yaml" >"$T/$name.log" 2>&1 ||
      { tail -n 20 "$T/$name.log"; fail "$name [$lay] did not train"; }
    case $name in *-bubble) ;; *) break ;; esac
    python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["foreign_share"] > float(sys.argv[2]))' \
      "$T/$name.cpu.json" "$BUSY" && break
    echo "$name: other processes took $(python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["foreign_share"])' "$T/$name.cpu.json") of a core; again"
  done
  "$DTRUN" --dry-run --format=json --hardware=cpu --nproc-per-node="$world" "$T/$name.yaml" \
    >"$T/$name.dry.json" 2>"$T/$name.dry.err" || { cat "$T/$name.dry.err"; fail "$name: dry-run failed"; }
  NAMES+=("$name")
}

