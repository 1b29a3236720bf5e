#!/usr/bin/env bash
# Paths are checked before any worker starts (issue 15, point 11): a missing
# data file is one line, exit 3, naming the key, the path and the directory a
# relative path is taken from; a missing resume checkpoint exits 6; an output
# that cannot be created (a file where the checkpoint directory should be, a
# metrics file under a file) exits 6 / 2. Nothing is spawned.
source "$(dirname "$0")/../helpers/preflight.bash"
cd "$T" || exit 1

tiny_job data.yaml "data: {kind: text, train: corpus/train.txt}"
sed -i 's/vocab_size: 32/vocab_size: 256/' data.yaml
run_dtrun data data.yaml
expect_one_line data 3 "dtrun: data.yaml:3:20: " "data.train 'corpus/train.txt': No such file or directory" \
  "(relative to $T, the directory dtrun runs in)"
mkdir corpus && head -c 3000 /dev/urandom >corpus/train.txt && chmod 000 corpus/train.txt
if [ "$(id -u)" != 0 ]; then
  run_dtrun unreadable data.yaml
  expect_one_line unreadable 3 "dtrun: data.yaml:3:20: " "Permission denied"
fi
chmod 644 corpus/train.txt
tiny_job val.yaml "data: {kind: text, train: $T/corpus/train.txt, val: $T/corpus/val.txt}"
sed -i 's/vocab_size: 32/vocab_size: 256/' val.yaml
run_dtrun val val.yaml
expect_one_line val 3 "dtrun: val.yaml:3:" "data.val '$T/corpus/val.txt': No such file or directory"
[[ $(cat "$T/val.err") != *"relative to"* ]] || fail "val: an absolute path said 'relative to'"

tiny_job resume.yaml "checkpoint: {dir: ck, resume: old/step_000010}"
run_dtrun resume resume.yaml
expect_one_line resume 6 "dtrun: resume.yaml:3:23: " "checkpoint.resume 'old/step_000010': No such file or directory"

touch notadir
tiny_job ckdir.yaml "checkpoint: {dir: notadir/ck}"
run_dtrun ckdir ckdir.yaml
expect_one_line ckdir 6 "dtrun: ckdir.yaml:3:14: " "checkpoint.dir 'notadir/ck': cannot be created: 'notadir' is not a directory"
tiny_job metrics.yaml "log: {metrics: notadir/m.jsonl}"
run_dtrun metrics metrics.yaml
expect_one_line metrics 2 "dtrun: metrics.yaml:3:7: " "log.metrics 'notadir/m.jsonl': cannot be created"

tiny_job glob.yaml "data: {kind: tokens, train: 'shards/train_*.bin'}"
run_dtrun glob glob.yaml
expect_one_line glob 3 "dtrun: glob.yaml:3:22: " "data.train 'shards/train_*.bin': no file matches the pattern"

# the same job with its data in place trains
run_dtrun good data.yaml
[ "$rc" -eq 0 ] && ok "with the file in place it trains" || fail "good: exit $rc: $(tail -2 "$T/good.err")"
finish
