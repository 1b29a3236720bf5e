#!/usr/bin/env bash
# Provenance (issue 15): a checkpoint's index says what produced it, and
# `dtrun inspect CKPT` prints it: dtrun's version and the commit it was built
# from, the launch command, the layout, the hardware, and the content hash of
# every data file. Changing one byte of the data file makes the resume warn
# in one line that the data changed (and go on); with --strict-data it is an
# error (exit 3, the data's status).
set -u
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/dtrun-provenance.XXXXXX); trap 'rm -rf "$T"' EXIT
export DTRUN_CACHE_DIR=$T/cache
fail() { echo "FAIL: $*"; exit 1; }
# a small text corpus, any bytes
python3 -c "import random; r = random.Random(5); open('$T/data.txt', 'wb').write(bytes(r.randrange(32, 127) for _ in range(100000)))"
job() { # STEPS
  cat >"$T/job.yaml" <<YAML
model: {kind: gpt, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 256, seq_len: 32}
data: {kind: text, train: $T/data.txt, val_fraction: 0.1}
train: {steps: $1, global_batch: 4, eval_batches: 1}
parallel: {dp: 2}
checkpoint: {dir: $T/ck, every: 3}
log: {progress: off}
YAML
}
job 6
bin/dtrun --nproc-per-node 2 "$T/job.yaml" >"$T/a.log" 2>&1 || { tail "$T/a.log"; fail "first run"; }
bin/dtrun inspect "$T/ck" >"$T/inspect.txt" 2>&1 || { cat "$T/inspect.txt"; fail "inspect exited $?"; }
cat "$T/inspect.txt" | sed 's/^/    /'
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
grep -q "^dtrun       0\.1\.0, commit $commit" "$T/inspect.txt" || fail "inspect: no version and commit $commit"
grep -q "^command     .*bin/dtrun --nproc-per-node 2 $T/job.yaml$" "$T/inspect.txt" || fail "inspect: not the launch command"
grep -q "^layout      dp 2 x tp 1 x pp 1 = 2 ranks" "$T/inspect.txt" || fail "inspect: no layout"
grep -q "^hardware    cpu backend on .*, 2 ranks, 2 per node" "$T/inspect.txt" || fail "inspect: no hardware"
grep -q "^env         .*OPENBLAS_CORETYPE=Haswell" "$T/inspect.txt" || fail "inspect: no environment knobs"
line=$(grep "^data        $T/data.txt  100000 bytes  xxh3 [0-9a-f]\{16\}$" "$T/inspect.txt") || fail "inspect: no data hash"
hash=${line##* }
# computed once: the cache remembers it by size and mtime
grep -q " $hash $T/data.txt$" "$T/cache/data-hashes.tsv" || fail "the data hash is not in the cache"
echo "ok   inspect: version, commit, command, layout, hardware, env, data hash $hash"

# one byte changed: the resume warns in one line and goes on
printf 'Z' | dd of="$T/data.txt" bs=1 seek=5000 conv=notrunc status=none
job 9
bin/dtrun --nproc-per-node 2 "$T/job.yaml" >"$T/b.log" 2>&1 || { tail "$T/b.log"; fail "resume after the change exited $?"; }
n=$(grep -c "changed since the checkpoint" "$T/b.log")
[ "$n" = 1 ] || { cat "$T/b.log"; fail "$n lines about the changed data, want 1"; }
grep -q "warning: data file $T/data.txt changed since the checkpoint was saved (xxh3 $hash then, [0-9a-f]\{16\} now); resuming anyway" "$T/b.log" ||
  { cat "$T/b.log"; fail "no warning naming the file and both hashes"; }
grep -q "resuming from $T/ck/step_000006" "$T/b.log" || fail "did not resume"
echo "ok   one byte changed: $(grep -o 'warning: data file.*' "$T/b.log" | head -1 | cut -c1-100)..."

# changed again, with --strict-data: an error, exit 3
printf 'W' | dd of="$T/data.txt" bs=1 seek=6000 conv=notrunc status=none
job 12
bin/dtrun --strict-data --nproc-per-node 2 "$T/job.yaml" >"$T/c.log" 2>&1; rc=$?
[ $rc = 3 ] || { tail "$T/c.log"; fail "--strict-data with changed data exited $rc, want 3"; }
grep -q "error: data file $T/data.txt changed since the checkpoint was saved" "$T/c.log" || fail "no error line"
echo "ok   --strict-data: exit 3"
echo "PASS provenance"
