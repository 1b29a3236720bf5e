#!/usr/bin/env python3
"""plan_compare.py — does the dry-run predict what the run then measured?

usage: plan_compare.py [--busy SHARE] [--bubble-points POINTS] [--moe] DIR NAME...

For each NAME, DIR/NAME.dry.json is `dtrun --dry-run --format json` of the job and
DIR/NAME.rankN.jsonl the metrics every rank of its run wrote (train.c). Memory: per
rank, the dry-run's prediction for its stage and tp rank (memory_by_tp_rank; the
coordinates from the mesh) against the rank's measured peaks, category by category. The two sides name categories
differently (sizes.h vs account.h); the worker accounts
    params       = sizes' params + master (fp32 master weights, mixed precision)
    grads        = grads
    optimizer    = optimizer (Adam m and v)
    activations  = activations + logits + workspace (host loss and batch buffers)
    buffers      = comm (DDP bucket, ZeRO-2 reduce / FSDP gather buffers, tied wte)
    total        = allocated (their sum; the largest sum at one moment, measured)
Goal: within 5 %; above 10 % the check fails.

--moe (model.moe jobs): the engine sizes an MoE block's expert buffers by the
rows that arrive (moe.c, ep.c), the dry-run prices them at its priced rows
(stages[].moe_rows.priced: the even load x a margin, or the capacity's bound),
so what a run holds depends on its routing. The run reports the fewest and most
rows one block's experts got in a micro-batch and the rows its ep staging grew
to (NAME.rankN.jsonl "moe_rows"); the dry-run says what a row more or less
moves its figures by (activations_per_row, buffers_per_row). Activations and
total must lie between the estimate moved to the fewest rows and to the most
(the peak may come while some blocks hold fewer than the most), buffers equal
the estimate moved to the staged rows; the same goal and limit apply to the
distance outside that range.

Bubble, for NAMEs with pp > 1 whose runs had a core per rank: the dry-run's
(pp_sim on the very schedule the executor runs, per-chunk costs from FLOPs)
against the executor's measured idle fraction (pp_exec), mean over the pp ranks,
within 5 points (--bubble-points: another limit). Per step the measured value is the mean over the ranks; the
steps whose wall time is in the slower half are left out and the median of the
rest is taken: a step in which another process took a rank's core makes the
other ranks wait, which is idle time of that machine, not of the schedule.
The first step (warm-up: page faults, first touches) is never used. And a run
during which other processes took more than SHARE of a core (DIR/NAME.cpu.json,
cpu_share.py; default 0.15) did not have a core per rank: its bubble is reported,
not judged; nor is one with more ranks than this machine has cores.

Prints a table and exits 1 when a check fails, 77 when none failed but a bubble
could not be judged.
"""
import glob
import json
import os
import statistics
import sys

GOAL, LIMIT, BUBBLE_POINTS = 0.05, 0.10, 0.05
CATS = ("params", "grads", "optimizer", "activations", "buffers", "total")


def predicted(stage_mem):
    m = stage_mem
    return {
        "params": m["params"] + m["master"],
        "grads": m["grads"],
        "optimizer": m["optimizer"],
        "activations": m["activations"] + m["logits"] + m["workspace"],
        "buffers": m["comm"],
        "total": m["allocated"],
    }


def moe_range(stage, pred, run):
    """pred's categories as (low, high) for the rows the run saw (--moe)."""
    mr, seen = stage["moe_rows"], run["moe_rows"]
    da, db = mr["activations_per_row"], mr["buffers_per_row"]
    lo_a = (seen["min"] - mr["priced"]) * da
    hi_a = (seen["max"] - mr["priced"]) * da
    buf = (seen["staged"] - mr["staged"]) * db if seen["staged"] else 0.0
    out = {c: (pred[c], pred[c]) for c in pred}
    out["activations"] = (pred["activations"] + lo_a, pred["activations"] + hi_a)
    out["buffers"] = (pred["buffers"] + buf, pred["buffers"] + buf)
    out["total"] = (pred["total"] + lo_a + buf, pred["total"] + hi_a + buf)
    return out


def rel_range(lo, hi, meas):
    if lo <= meas <= hi:
        return 0.0
    return rel(lo if meas < lo else hi, meas)


def rel(pred, meas):
    if pred == meas:
        return 0.0
    if pred == 0:
        return float("inf")
    return (meas - pred) / pred


def kib(b):
    return f"{b / 1024:.1f}"


def ranks(d, name):
    out = {}
    for f in glob.glob(f"{d}/{name}.rank*.jsonl"):
        rows = [json.loads(line) for line in open(f) if line.strip()]
        if rows:
            out[rows[-1]["rank"]] = rows
    return out


def measured_bubble(runs):
    """The measured bubble of a run's ranks (NAME.rankN.jsonl rows by rank): the
    median over the faster half of steps 2..N of the mean over ranks; and per rank."""
    n_steps = min(len(rows) for rows in runs.values())
    steps = []
    for s in range(1, n_steps):  # step 1 is warm-up
        wall = max(runs[r][s]["time"]["wall"] for r in runs)
        b = statistics.fmean(runs[r][s]["bubble"] for r in runs)
        steps.append((wall, b, [runs[r][s]["bubble"] for r in sorted(runs)]))
    steps.sort()
    fast = steps[: max(1, (len(steps) + 1) // 2)]
    meas = statistics.median(b for _, b, _ in fast)
    per_rank = [statistics.median(x[2][i] for x in fast) for i in range(len(runs))]
    return meas, per_rank


def main():
    global BUBBLE_POINTS
    args = sys.argv[1:]
    busy_limit = 0.15
    moe = False
    while args[:1] in (["--busy"], ["--bubble-points"], ["--moe"]):
        if args[0] == "--moe":
            moe = True
            args = args[1:]
            continue
        if args[0] == "--busy":
            busy_limit = float(args[1])
        else:
            BUBBLE_POINTS = float(args[1]) / 100
        args = args[2:]
    d, names = args[0], args[1:]
    ok, unjudged = True, 0
    worst = 0.0
    print("memory per rank, predicted / measured KiB (difference); goal 5 %, fails above 10 %")
    print(f"  {'layout':<28} {'rank':<12}" + "".join(f" {c:>26}" for c in CATS))
    bubbles = []
    for name in names:
        dry = json.load(open(f"{d}/{name}.dry.json"))
        runs = ranks(d, name)
        world = dry["layout"]["world"]
        if sorted(runs) != list(range(world)):
            print(f"FAIL {name}: metrics of ranks {sorted(runs)}, expected 0..{world - 1}")
            ok = False
            continue
        for r in range(world):
            c = dry["mesh"][r]
            stage = dry["stages"][c["pp"]]
            pred = predicted(stage["memory_by_tp_rank"][c["tp"]] if "memory_by_tp_rank" in stage else stage["memory"])
            meas = dict(runs[r][-1]["mem_peak"])
            # the fp32 master of mixed precision is its own category in the
            # measurements; the dry-run's params + master cover both
            meas["params"] += meas.get("master", 0)
            span = moe_range(stage, pred, runs[r][-1]) if moe else {k: (v, v) for k, v in pred.items()}
            cells = []
            for cat in CATS:
                lo, hi = span[cat]
                e = rel_range(lo, hi, meas[cat])
                worst = max(worst, abs(e))
                mark = "" if abs(e) <= GOAL else " *" if abs(e) <= LIMIT else " !"
                if abs(e) > LIMIT:
                    ok = False
                shown = kib(lo) if lo == hi else f"{kib(lo)}..{kib(hi)}"
                cells.append(f"{shown}/{kib(meas[cat])}({100 * e:+.1f}%){mark}")
            where = f"{r} ({c['dp']},{c['pp']},{c['tp']})"
            print(f"  {name:<28} {where:<12}" + "".join(f" {x:>26}" for x in cells))
            if moe:
                mr, seen = stage["moe_rows"], runs[r][-1]["moe_rows"]
                print(f"    rows at one block's experts: {seen['min']}..{seen['max']} "
                      f"({seen['min'] / mr['even']:.2f}..{seen['max'] / mr['even']:.2f} x the even {mr['even']}), "
                      f"priced {mr['priced']}, worst {mr['worst']}; staging {seen['staged']} rows "
                      f"(priced {mr['staged']})")
        if dry["layout"]["pp"] > 1 and name.endswith("-bubble"):
            bubbles.append((name, dry, runs))
    print("  rank (dp,pp,tp); * beyond the 5 % goal, ! beyond the 10 % limit")
    print(f"worst memory difference: {100 * worst:.2f} %")

    if bubbles:
        print("pipeline bubble: predicted (dry-run, cpu profile) vs measured idle fraction "
              "(median of the faster half of steps 2..N), ideal (p-1)/(v*m+p-1)")
    for name, dry, runs in bubbles:
        meas, per_rank = measured_bubble(runs)
        pred = dry["step"]["bubble"]
        ideal = dry["pipeline"]["ideal_bubble"]
        diff = meas - pred
        good = abs(diff) <= BUBBLE_POINTS
        try:
            foreign = json.load(open(f"{d}/{name}.cpu.json"))["foreign_share"]
        except (OSError, ValueError, KeyError):
            foreign = 0.0
        verdict = "ok  " if good else "FAIL"
        if dry["layout"]["world"] > len(os.sched_getaffinity(0)):
            verdict = "cores"  # ranks shared cores: not a measurement of the schedule
            unjudged += 1
        elif foreign > busy_limit:
            verdict = "busy"  # other processes had the cores: not a measurement of the schedule
            unjudged += 1
        else:
            ok &= good
        lay = dry["layout"]
        print(f"  {verdict} {name:<28} pp {lay['pp']} m {lay['microbatches']} "
              f"{lay['pp_schedule']:<11} predicted {100 * pred:5.1f} %  measured {100 * meas:5.1f} % "
              f"(ranks {' '.join(f'{100 * x:.1f}' for x in per_rank)})  ideal {100 * ideal:5.1f} %  "
              f"difference {100 * diff:+.1f} points; others took {foreign:.2f} of a core")
    return 1 if not ok else 77 if unjudged else 0


if __name__ == "__main__":
    sys.exit(main())
