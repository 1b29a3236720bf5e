#!/usr/bin/env python3
"""trace_check.py — is a `dtrun --trace` file what it promises?

usage: trace_check.py TRACE.json METRICS_STEM WORLD STEPS [need LANE:NAME_PREFIX ...]

TRACE.json: the merged Chrome trace (runtime/parallel/trace.h); METRICS_STEM:
the job's log.metrics without ".jsonl", whose STEM.rankN.jsonl every rank wrote.
Checks:
  - a {"traceEvents": [...]} object; every span ph "X" with pid = a rank in
    0..WORLD-1, tid a lane (0 compute, 1 comm, 2 idle, 3 step), ts >= 0, dur >= 0,
    and process / thread names for every rank;
  - every rank has STEPS step spans, and forward and backward unit spans;
  - spans on one lane of one rank nest or are disjoint (what the viewers need);
  - each rank's comm and idle time inside its step spans equals what its metrics
    measured over the same steps (the same clock readings: within 1 % + 0.2 ms);
  - every `need LANE:PREFIX` names a span that exists on every rank (e.g.
    idle:wait: RECV for a pipeline, comm:ddp for data parallelism).
Exits 1 with the first problem."""
import json
import sys
from collections import defaultdict

LANES = {"compute": 0, "comm": 1, "idle": 2, "step": 3}


def die(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    path, stem, world, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    needs = [a.split(":", 1) for a in sys.argv[5:]]
    d = json.load(open(path))
    if not isinstance(d, dict) or not isinstance(d.get("traceEvents"), list):
        die("no traceEvents array")
    spans = defaultdict(list)  # (pid, tid) -> [(ts, end, name)]
    named = set()
    for e in d["traceEvents"]:
        ph = e.get("ph")
        if ph == "M":
            named.add((e["pid"], e.get("tid", -1), e["name"]))
            continue
        if ph != "X":
            die(f"unexpected event {e}")
        pid, tid, ts, dur = e["pid"], e["tid"], e["ts"], e["dur"]
        if pid not in range(world) or tid not in LANES.values() or ts < 0 or dur < 0 or not e["name"]:
            die(f"bad span {e}")
        spans[(pid, tid)].append((ts, ts + dur, e["name"]))
    for r in range(world):
        if (r, -1, "process_name") not in named or any((r, t, "thread_name") not in named for t in LANES.values()):
            die(f"rank {r}: process or lane names missing")
        st = sorted(spans[(r, LANES["step"])])
        if len(st) != steps:
            die(f"rank {r}: {len(st)} step spans, expected {steps}")
        comp = [n for _, _, n in spans[(r, 0)]]
        if not any(n.startswith("fwd unit") for n in comp) or not any(n.startswith("bwd unit") for n in comp):
            die(f"rank {r}: no forward / backward unit spans")
        for lane, prefix in needs:
            if not any(n.startswith(prefix) for _, _, n in spans[(r, LANES[lane])]):
                die(f"rank {r}: no '{prefix}' span on the {lane} lane")
        # nesting: a stack of open spans; rounding of printed times is 1 ns
        for tid in LANES.values():
            stack = []
            for a, b, n in sorted(spans[(r, tid)], key=lambda s: (s[0], -s[1])):
                while stack and stack[-1][1] <= a + 1e-3:
                    stack.pop()
                if stack and b > stack[-1][1] + 1e-3:
                    die(f"rank {r} lane {tid}: '{n}' [{a}, {b}] overlaps '{stack[-1][2]}' {stack[-1][:2]}")
                stack.append((a, b, n))
        # lane totals inside the steps vs the rank's metrics over the same steps
        rows = [json.loads(line) for line in open(f"{stem}.rank{r}.jsonl") if line.strip()]
        if len(rows) != steps:
            die(f"rank {r}: {len(rows)} metrics lines, expected {steps}")
        for lane, key in (("comm", "comm"), ("idle", "idle")):
            traced = sum(min(b, sb) - max(a, sa) for a, b, _ in spans[(r, LANES[lane])]
                         for sa, sb, _ in st if a < sb and b > sa) / 1e6
            measured = sum(row["time"][key] for row in rows)
            if abs(traced - measured) > 0.01 * measured + 2e-4:
                die(f"rank {r}: {lane} spans add up to {traced:.6f} s, the metrics measured {measured:.6f} s")
            print(f"rank {r}: {lane} {traced * 1e3:.3f} ms traced, {measured * 1e3:.3f} ms measured")
    n = sum(len(v) for v in spans.values())
    print(f"ok: {n} spans from {world} ranks, {steps} steps each")


if __name__ == "__main__":
    main()
