#!/usr/bin/env python3
"""compare.py — is a layout's run the single-process run?

usage: compare.py REF.jsonl REF.bin RUN.jsonl RUN.bin [LOSS_RTOL] [PARAM_ATOL]

REF/RUN.jsonl: rank 0's metrics files (one {"step":..,"loss":..} line per step,
val_loss lines too); REF/RUN.bin: the final parameters DTRUN_DUMP_PARAMS wrote
(raw float32 in parameter-spec order, the same layout whatever the run's).
Checks that every step's loss (and every val_loss) agrees within a relative
LOSS_RTOL (default 1e-5) and every parameter within an absolute PARAM_ATOL
(default 1e-4). Prints one line "max_rel_loss=.. max_param_diff=.. steps=N" and
exits 0 when both hold, 1 (with the first offending step / element) otherwise.
"""
import json
import struct
import sys


def losses(path):
    steps, vals = {}, {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            o = json.loads(line)
            if "loss" in o:
                steps[o["step"]] = o["loss"]
            if "val_loss" in o:
                vals[o["step"]] = o["val_loss"]
    return steps, vals


def floats(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) % 4:
        sys.exit(f"{path}: {len(data)} bytes is not a whole number of float32")
    return struct.unpack(f"<{len(data) // 4}f", data)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    ref_j, ref_b, run_j, run_b = sys.argv[1:5]
    rtol = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-5
    atol = float(sys.argv[6]) if len(sys.argv) > 6 else 1e-4
    ok = True
    (rs, rv), (ts, tv) = losses(ref_j), losses(run_j)
    if not rs or sorted(rs) != sorted(ts) or sorted(rv) != sorted(tv):
        print(f"steps differ: reference {sorted(rs)} val {sorted(rv)}, run {sorted(ts)} val {sorted(tv)}")
        sys.exit(1)
    worst, where = 0.0, None
    for kind, r, t in (("loss", rs, ts), ("val_loss", rv, tv)):
        for s in sorted(r):
            d = abs(t[s] - r[s]) / max(abs(r[s]), 1e-30)
            if d > worst:
                worst, where = d, f"{kind} step {s}: {t[s]} vs {r[s]}"
    if worst > rtol:
        ok = False
        print(f"loss differs beyond {rtol}: {where}")
    a, b = floats(ref_b), floats(run_b)
    if len(a) != len(b):
        print(f"parameter files differ in size: {len(a)} vs {len(b)} floats")
        sys.exit(1)
    pd, pi = 0.0, -1
    for i, (x, y) in enumerate(zip(a, b)):
        d = abs(x - y)
        if d != d:  # NaN
            d = float("inf")
        if d > pd:
            pd, pi = d, i
    if pd > atol:
        ok = False
        print(f"parameter {pi} differs by {pd} ({b[pi]} vs {a[pi]})")
    print(f"max_rel_loss={worst:.3g} max_param_diff={pd:.3g} steps={len(rs)} params={len(a)}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
