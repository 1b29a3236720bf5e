#!/usr/bin/env bash
# Deeply nested YAML is refused at once (issue 15, point 6): 100,000 levels of
# flow sequences, of flow mappings and 1,000 of block sequences each give one
# line "FILE:LINE:COL: YAML nested deeper than 64 levels", exit 2, within 2 s
# (libyaml's loader took 39 s to reject the first).
source "$(dirname "$0")/../helpers/preflight.bash"

python3 - "$T" <<'PY'
import sys
t = sys.argv[1]
n = 100000
open(t + "/flow-seq.yaml", "w").write("model: {kind: gpt}\ntrain: {steps: 1}\nparallel: {dp: " + "[" * n + "]" * n + "}\n")
open(t + "/flow-map.yaml", "w").write("model:\n  kind: gpt\n  n_layer: " + "{a: " * n + "1" + "}" * n + "\n")
open(t + "/block-seq.yaml", "w").write("train:\n" + "".join(" " * (i + 1) + "-\n" for i in range(1000)))
PY
for f in flow-seq:3 flow-map:3 block-seq:; do
  name=${f%%:*} line=${f#*:}
  start=$(date +%s%N)
  run_dtrun "$name" --print-config "$T/$name.yaml"
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  expect_one_line "$name" 2 "dtrun: $T/$name.yaml:$line" "YAML nested deeper than 64 levels"
  [ "$ms" -lt 2000 ] && ok "$name refused in $ms ms" || fail "$name took $ms ms"
done
# 64 levels (the document mapping, train, 62 lists) are still parsed (and refused for what they are: not a number)
python3 -c 'print("train: {steps: " + "[" * 62 + "]" * 62 + "}")' >"$T/ok64.yaml"
run_dtrun ok64 --print-config "$T/ok64.yaml"
expect_one_line ok64 2 "dtrun: $T/ok64.yaml:1:" "train.steps"
finish
