#!/usr/bin/env bash
# log.tensorboard: a 2-rank run (dp 2) writes TensorBoard event files that a
# reader written from the record format's spec (test/tensorboard/read_tfevents.py:
# both masked CRC-32Cs of every record checked, the Event protobuf decoded by
# hand) reads back: every train/loss, train/lr, train/grad_norm,
# perf/tokens_per_s, perf/mfu_percent and val/loss scalar of rank 0 equals the
# run's JSONL (to float32), and each rank's memory scalars equal its
# STEM.rankN.jsonl; the MFU is the model's FLOPs at that tokens/s over the cpu
# profile's peak (one host), and --hardware h100-sxm measures against 2 H100s;
# a file with a flipped bit is refused. An unwritable directory stops the run
# with one line and exit 1, a bad key with file:line:col and exit 2.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${DTRUN_BIN:-bin/dtrun}
if [ ! -x "$bin" ]; then echo "$bin is not built (make all)"; exit 77; fi
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
T=$(mktemp -d /tmp/tensorboard.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
job() { # FILE TBDIR
  cat >"$1" <<YAML
model: {kind: gpt, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 64, seq_len: 16}
data: {kind: synthetic}
train: {steps: 12, global_batch: 4, micro_batch: 2, lr: 1.0e-3, warmup: 3, eval_every: 5, eval_batches: 2}
parallel: {dp: 2}
log: {metrics: $T/run.jsonl, tensorboard: "$2", progress: off}
YAML
}
job "$T/job.yaml" "$T/tb"
"$bin" --nproc-per-node=2 "$T/job.yaml" >"$T/log" 2>&1 || { tail "$T/log"; fail "training exited $?"; }
f0=$(ls "$T"/tb/events.out.tfevents.*) f1=$(ls "$T"/tb/rank1/events.out.tfevents.*) ||
  { find "$T/tb"; fail "no event file for rank 0 and rank 1"; }
python3 test/tensorboard/read_tfevents.py "$f0" "$f1" >"$T/scalars.jsonl" || fail "the reader refused the files"
python3 - "$T/scalars.jsonl" "$T/run.jsonl" "$T/run.rank0.jsonl" "$T/run.rank1.jsonl" "$f0" "$f1" <<'PY' || exit 1
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
jl = [json.loads(l) for l in open(sys.argv[2])]
ranks = [[json.loads(l) for l in open(p)] for p in sys.argv[3:5]]
files = sys.argv[5:7]
def f32(x):  # what a float32 keeps of a double
    import struct
    return struct.unpack("<f", struct.pack("<f", x))[0]
def close(a, b):
    return math.isclose(a, f32(b), rel_tol=2e-6, abs_tol=1e-6)
ok = True
def check(cond, what):
    global ok
    print(("ok: " if cond else "FAIL: ") + what)
    ok &= bool(cond)
for f in files:
    v = [r for r in recs if r["file"] == f and "file_version" in r]
    check(len(v) == 1 and v[0]["file_version"] == "brain.Event:2", f"{f.split('/')[-2]}: first record brain.Event:2")
got = {}
for r in recs:
    if "tag" in r:
        got.setdefault((r["file"], r["tag"]), []).append((r["step"], r["value"]))
want = {}
for r in jl:
    if "loss" in r:
        for tag, key in (("train/loss", "loss"), ("train/lr", "lr"), ("train/grad_norm", "grad_norm"),
                         ("perf/tokens_per_s", "tokens_per_s"), ("perf/mfu_percent", "mfu_percent")):
            want.setdefault((files[0], tag), []).append((r["step"], r[key]))
        # MFU from first principles: 6 x matmul weights x tokens + 12 L T^2 C per
        # sequence (PaLM's count, the dry-run's), over the cpu profile's 0.2 TFLOP/s
        L, C, V, T = 1, 32, 64, 16
        flops = 6 * T * (12 * L * C * C + V * C) + 12 * L * T * T * C
        mfu = 100 * flops * r["tokens_per_s"] / T / 0.2e12
        check(abs(mfu - r["mfu_percent"]) <= 5e-4 + 1e-5 * mfu,
              f"step {r['step']}: MFU {r['mfu_percent']} % = the model's FLOPs at that tokens/s over the peak ({mfu:.4f} %)")
    if "val_loss" in r:
        want.setdefault((files[0], "val/loss"), []).append((r["step"], r["val_loss"]))
for rank, rows in enumerate(ranks):
    for r in rows:
        want.setdefault((files[rank], "memory/accounted_peak_MiB"), []).append((r["step"], r["mem_peak"]["total"] / 2**20))
        want.setdefault((files[rank], "memory/rss_peak_MiB"), []).append((r["step"], r["rss_peak"] / 2**20))
n = 0
for key, rows in sorted(want.items()):
    g = got.get(key, [])
    # tokens/s is written with %.1f in the JSONL: compare to that rounding
    tol = (lambda a, b: abs(a - b) <= 0.05 + 2e-6 * abs(b)) if key[1].startswith("perf/") else close
    same = len(g) == len(rows) and all(s1 == s2 and tol(v1, v2) for (s1, v1), (s2, v2) in zip(g, rows))
    check(same, f"rank {files.index(key[0])} {key[1]}: {len(g)} scalars = the JSONL's {len(rows)}")
    n += len(g)
extra = set(got) - set(want)
check(not extra, f"no scalar without a JSONL counterpart {sorted(k[1] for k in extra)}")
check(n == sum(len(v) for v in got.values()) and n > 80, f"{n} scalars read back, every one matched")
sys.exit(0 if ok else 1)
PY

# --hardware names the peak: two H100s' fp32 peak (the profile's), not the host's
sed -i "s|$T/run.jsonl|$T/h100.jsonl|; s|$T/tb|$T/tb-h100|" "$T/job.yaml"
"$bin" --nproc-per-node=2 --hardware h100-sxm "$T/job.yaml" >"$T/log" 2>&1 || { tail "$T/log"; fail "training with --hardware exited $?"; }
python3 - "$T/h100.jsonl" configs/hardware/h100-sxm.yaml <<'PY' || fail "MFU against --hardware h100-sxm"
import json, re, sys
peak = float(re.search(r"^peak_fp32_tflops:\s*([0-9.]+)", open(sys.argv[2]).read(), re.M).group(1)) * 1e12
L, C, V, T = 1, 32, 64, 16
flops = 6 * T * (12 * L * C * C + V * C) + 12 * L * T * T * C
rows = [r for r in map(json.loads, open(sys.argv[1])) if "tokens_per_s" in r]
for r in rows:
    want = 100 * flops * r["tokens_per_s"] / T / (2 * peak)
    assert abs(r["mfu_percent"] - want) <= 5e-4 + 1e-3 * want, (r, want)
print(f"ok: --hardware h100-sxm: MFU over 2 x {peak / 1e12:g} TFLOP/s, e.g. {rows[-1]['mfu_percent']} %")
PY

# a flipped bit in the data is found by the data CRC, in the length by its own
cp "$f0" "$T/bad"
python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[len(b)//2]^=4; open(p,"wb").write(b)' "$T/bad"
python3 test/tensorboard/read_tfevents.py "$T/bad" >/dev/null 2>"$T/err" && fail "a flipped bit went unnoticed"
grep -q "bad data CRC\|bad length CRC" "$T/err" || { cat "$T/err"; fail "no CRC error"; }
echo "ok: a flipped bit: $(cat "$T/err")"

# errors: an unwritable directory (whichever rank meets it first says so), a mistyped key
job "$T/job2.yaml" /proc/dtrun-no-tb
"$bin" --nproc-per-node=2 "$T/job2.yaml" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 1 ] || { cat "$T/err"; fail "unwritable log.tensorboard: exit $rc, want 1"; }
grep -q "log.tensorboard: /proc/dtrun-no-tb/\\(rank[0-9]*/\\)\\?events.out.tfevents.*: cannot write" "$T/err" || { cat "$T/err"; fail "no line"; }
echo "ok: exit 1: $(grep tensorboard "$T/err" | head -1)"
sed -i 's/tensorboard:/tensorbord:/' "$T/job2.yaml"
"$bin" --print-config "$T/job2.yaml" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "job2.yaml:5:.*unknown key 'tensorbord' in section 'log'; did you mean 'tensorboard'?" "$T/err" ||
  { cat "$T/err"; fail "mistyped key: exit $rc"; }
echo "ok: exit 2: $(cat "$T/err")"
echo PASS
