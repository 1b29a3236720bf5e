# init_from.bash — shared by test/integration/init_from.sh and init_from_vit.sh
# (sourced after test/parallel/lib.bash; the test defines same_as_torch and
# ref_bytes, and has run the one-process reference "ref").

# init_from_layouts JOB_FN: tp 2, pp 2 and fsdp 2 started from the folder the
# reference loaded (JOB_FN LAYOUT NAME writes $T/NAME.yaml): each gets
# PyTorch's loss (same_as_torch), one fine-tuning step equal to one process's,
# and each rank reads fewer tensor bytes than one process did.
init_from_layouts() {
  local job=$1 lay name out n b
  for lay in "tp=2" "pp=2" "dp=2 mode=fsdp"; do
    name=$(layout_name "$lay")
    "$job" "$lay" "$name"
    DTRUN_DUMP_PARAMS=$T/$name.bin timeout -k 5 120 "$DTRUN" --nproc-per-node=2 "$T/$name.yaml" >"$T/$name.log" 2>&1 ||
      { tail "$T/$name.log"; fail "$lay: run from init_from"; }
    same_as_torch "$name"
    out=$(python3 "$ROOT/test/parallel/compare.py" "$T/ref.jsonl" "$T/ref.bin" "$T/$name.jsonl" "$T/$name.bin" 1e-5 1e-4) ||
      { echo "$out"; fail "$lay: one fine-tuning step differs from one process"; }
    echo "ok: $lay: one step as one process: ${out##*$'\n'}"
    n=0
    while read -r b; do
      [ "$b" -lt "$ref_bytes" ] || fail "$lay: a rank read $b tensor bytes, not fewer than one process's $ref_bytes"
      n=$((n + 1))
    done < <(sed -n 's/.*read \([0-9]*\) tensor bytes.*/\1/p' "$T/$name.log")
    [ $n = 2 ] || { cat "$T/$name.log"; fail "$lay: $n ranks said what they read, want 2"; }
    echo "ok: $lay: each rank read only its slices: $(sed -n 's/.*read \([0-9]*\) tensor bytes.*/\1/p' "$T/$name.log" | tr '\n' ' ')of one process's $ref_bytes bytes"
  done
}
