#!/usr/bin/env bash
# What the dry-run says does not fit is not started (issue 15, point 14): on
# this CPU host a GPT-2 1.5B job with a big batch is refused before spawning
# with the dry-run's one-line OOM verdict, exit 2 (nothing is allocated); a
# tiny job against a 1 MiB hardware profile (--hardware PATH) is refused the
# same way, and --no-fit-check starts it anyway and it trains. A resume whose
# checkpoint holds another model is refused before spawning too: one line,
# exit 6, naming the checkpoint and the dimension.
source "$(dirname "$0")/../helpers/preflight.bash"
cd "$T" || exit 1

printf 'model: {preset: gpt2-1.5b}\ntrain: {steps: 2, global_batch: 64}\n' >big.yaml
run_dtrun big --nproc-per-node=1 big.yaml
expect_one_line big 2 "dtrun: big.yaml: does not fit on cpu: OOM on pipeline stage 0: " "GB needed" "--no-fit-check"
"$DTRUN" --dry-run big.yaml | grep -q "OOM on pipeline stage 0" && ok "the dry-run says the same" ||
  fail "the dry-run does not report the OOM"

sed 's/^memory_mib: 0 .*/memory_mib: 1/' "$OLDPWD/configs/hardware/cpu.yaml" >tiny-host.yaml
tiny_job small.yaml   # ~110 k parameters: ~2 MB of model state
sed -i 's/d_model: 16, vocab_size: 32/d_model: 64, vocab_size: 256/' small.yaml
run_dtrun small --hardware "$T/tiny-host.yaml" small.yaml
expect_one_line small 2 "dtrun: small.yaml: does not fit on cpu: OOM on pipeline stage 0: " "1.05 MB on the device"
run_dtrun forced --no-fit-check --hardware "$T/tiny-host.yaml" small.yaml
[ "$rc" -eq 0 ] && grep -q "done: 4 steps" "$T/forced.out" && ok "--no-fit-check starts it and it trains" ||
  fail "--no-fit-check: exit $rc: $(tail -2 "$T/forced.err")"

tiny_job a.yaml "checkpoint: {dir: ck}"
run_dtrun a a.yaml
[ "$rc" -eq 0 ] && [ -f ck/step_000004/index.json ] || fail "first run: exit $rc"
sed 's/d_model: 16/d_model: 32/' a.yaml >wider.yaml
run_dtrun wider wider.yaml
expect_one_line wider 6 "dtrun: wider.yaml: cannot resume: ck/step_000004: the checkpoint's model has d_model 16 but the job's has 32"
finish
