#!/usr/bin/env bash
# Layout rules are answered before anything starts (issue 15, point 2): a job
# whose dp x tp x pp differs from the workers launched is one line, exit 2,
# naming both numbers and the keys/flags that set them, at the key's
# FILE:LINE:COL; a rule only the worker used to check (the interleaved
# schedule's micro-batches a multiple of pp) is the same line in
# --print-config, --dry-run and at launch; dp: auto over a world that tp x pp
# does not divide is refused too.
source "$(dirname "$0")/../helpers/preflight.bash"

# dp 2 on one process: from the command line, from the default, from the job's launch section
tiny_job "$T/dp2.yaml" "parallel: {dp: 2, tp: 1}"
run_dtrun dp2-flag --nproc-per-node=1 "$T/dp2.yaml"
expect_one_line dp2-flag 2 "dtrun: $T/dp2.yaml:3:12: " "parallel.dp 2 x tp 1 x pp 1 = 2 workers" "but 1 is started" \
  "--nproc-per-node 1 x --nnodes 1"
run_dtrun dp2-default "$T/dp2.yaml"
expect_one_line dp2-default 2 "dtrun: $T/dp2.yaml:3:12: " "= 2 workers" "(the default)"
tiny_job "$T/dp2-launch.yaml" "parallel: {dp: 2}" "launch: {nproc_per_node: 3}"
run_dtrun dp2-launch "$T/dp2-launch.yaml"
expect_one_line dp2-launch 2 "dtrun: $T/dp2-launch.yaml:3:12: " "= 2 workers, but 3 are started" "launch.nproc_per_node 3"
# tp x pp = 4 on 2 processes: blamed at the first of dp/tp/pp the file gave
tiny_job "$T/tp2pp2.yaml" "parallel:" "  tp: 2" "  pp: 2"
run_dtrun tp2pp2 --nproc-per-node=2 "$T/tp2pp2.yaml"
expect_one_line tp2pp2 2 "dtrun: $T/tp2pp2.yaml:4:3: " "parallel.dp 1 x tp 2 x pp 2 = 4 workers, but 2 are started"

# interleaved with 3 micro-batches over pp 2: the same line everywhere
tiny_job "$T/inter.yaml" "parallel: {pp: 2, pp_schedule: interleaved, microbatches: 3}"
sed -i 's/global_batch: 4/global_batch: 6/; s/n_layer: 2/n_layer: 4/' "$T/inter.yaml"
want="microbatches 3 must be a multiple of parallel.pp 2 with pp_schedule interleaved"
run_dtrun inter-print --print-config "$T/inter.yaml"
expect_one_line inter-print 2 "dtrun: $T/inter.yaml:3:45: " "$want" "try 4 or 2"
run_dtrun inter-dry --dry-run "$T/inter.yaml"
expect_one_line inter-dry 2 "dtrun: $T/inter.yaml:3:45: " "$want"
[ ! -s "$T/inter-dry.out" ] || fail "inter-dry: output on stdout"
run_dtrun inter-launch --nproc-per-node=2 "$T/inter.yaml"
expect_one_line inter-launch 2 "dtrun: $T/inter.yaml:3:45: " "$want"

# dp: auto on 3 processes with tp 2
tiny_job "$T/auto.yaml" "parallel: {dp: auto, tp: 2}"
sed -i 's/global_batch: 4/global_batch: 4, micro_batch: 1/' "$T/auto.yaml"
run_dtrun auto --nproc-per-node=3 "$T/auto.yaml"
expect_one_line auto 2 "dtrun: $T/auto.yaml:3:12: " "the world of 3 workers is not a multiple of tp x pp = 2"

# a job that fits its launch still trains
tiny_job "$T/good.yaml" "parallel: {dp: 2}"
run_dtrun good --nproc-per-node=2 "$T/good.yaml"
[ "$rc" -eq 0 ] && grep -q "done: 4 steps" "$T/good.out" && ok "dp 2 on 2 workers trains" ||
  fail "good: exit $rc: $(tail -3 "$T/good.err")"
finish
