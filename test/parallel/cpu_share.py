#!/usr/bin/env python3
"""cpu_share.py — run a command and say whether it had the machine to itself.

usage: cpu_share.py OUT.json -- COMMAND [ARGS...]

Runs COMMAND (stdout / stderr inherited) and writes OUT.json:
    {"wall_s": .., "own_cpu_s": .., "busy_cpu_s": .., "foreign_cpu_s": ..,
     "foreign_share": ..}
busy_cpu_s: CPU time the whole machine spent busy meanwhile (/proc/stat: user,
nice, system, irq, softirq, and steal, which a hypervisor gave to other guests);
own_cpu_s: what COMMAND and every process it waited for used (RUSAGE_CHILDREN);
foreign = busy - own: other processes' share, as a fraction of wall_s (1.0 = one
whole core). Timing checks that need a core per rank (the pipeline bubble) use it
to tell a slow schedule from a machine that was busy with something else.
Exits with COMMAND's status."""
import json
import os
import subprocess
import sys
import time


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice
    return v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)


def main():
    out, cmd = sys.argv[1], sys.argv[3:]
    hz = os.sysconf("SC_CLK_TCK")
    c0, b0, w0 = os.times(), busy_jiffies(), time.monotonic()
    rc = subprocess.call(cmd)
    c1, b1, w1 = os.times(), busy_jiffies(), time.monotonic()
    own = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    busy = (b1 - b0) / hz
    wall = w1 - w0
    foreign = max(0.0, busy - own)
    with open(out, "w") as f:
        json.dump({"wall_s": wall, "own_cpu_s": own, "busy_cpu_s": busy, "foreign_cpu_s": foreign,
                   "foreign_share": foreign / wall if wall > 0 else 0.0}, f)
    return rc


if __name__ == "__main__":
    sys.exit(main())
