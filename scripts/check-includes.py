#!/usr/bin/env python3
"""check-includes.py — the include arrows of DESIGN.md, checked.

Every #include "..." in cmd/, lib/, runtime/ and kernels/ must point down the
house: a folder may include its own files and those of folders below it.
The order, top to bottom (a folder's level; higher may include lower):

  cmd                                   the thin main()s
  runtime/infer                         generate and eval: a model source to a job, sampling
  runtime/train                         the step loop, checkpoint policy
  runtime/worker                        the engine: set-up, strategies applied
  runtime/plan                          dry-run and planner (pure functions)
  runtime/parallel, runtime/ckpt        strategies and mesh; checkpoint format
  runtime/optim, runtime/data           AdamW over slices; data loaders
  runtime/comm, runtime/model           communication; the model (never comm)
  runtime (root files: rng, env)        leaves every runtime folder may use
  lib/launch                            the agent, options, Slurm
  lib/rdzv, lib/job, lib/text,         rendezvous + KV store; the job spec;
  lib/plot                              the tokenizer; plots of metrics files
  lib/util                              clock, error lines, exit codes
  kernels (kernels/, cpu/, cuda/)       pure compute: includes nothing above

Folders on one level may not include each other (runtime/model never reaches
runtime/comm; lib/job and lib/rdzv stay apart), so the graph between folders
has no cycle by construction. A folder that is not in the table is an error
too: a new folder gets its level here, on purpose. Outside kernels/, only the
ops table's headers (kernels/*.h) may be included, never a backend's own
(kernels/cpu/*, kernels/cuda/*): the runtime reaches a backend through its ops
table (the stream, where memory lives), never directly.

  scripts/check-includes.py [--root DIR]    exit 0: clean; 1: a line per bad arrow
"""
import os
import re
import sys

LEVELS = {
    "cmd": 100,
    "runtime/infer": 95,
    "runtime/train": 90,
    "runtime/worker": 80,
    "runtime/plan": 70,
    "runtime/parallel": 60,
    "runtime/ckpt": 60,
    "runtime/optim": 50,
    "runtime/data": 50,
    "runtime/comm": 40,
    "runtime/model": 40,
    "runtime": 30,
    "lib/launch": 25,
    "lib/rdzv": 20,
    "lib/job": 20,
    "lib/text": 20,
    "lib/plot": 20,
    "lib/util": 10,
    "kernels": 0,
}
TOPS = ("cmd", "lib", "runtime", "kernels")
SOURCE = re.compile(r".*\.(c|h|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(path):
    """The checked folder a root-relative path belongs to, or None."""
    parts = path.split("/")
    if parts[0] == "kernels":
        return "kernels"  # kernels/, kernels/cpu, kernels/cuda: one room
    if parts[0] in ("lib", "runtime") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0] if parts[0] in TOPS else None


def main():
    root = "."
    args = sys.argv[1:]
    if args[:1] == ["--root"] and len(args) == 2:
        root = args[1]
    elif args:
        print("usage: scripts/check-includes.py [--root DIR]", file=sys.stderr)
        return 2
    bad = []
    files = 0
    for top in TOPS:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not SOURCE.match(name):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                src = folder_of(path)
                files += 1
                if src not in LEVELS:
                    bad.append(f"{path}: folder {src} has no level in scripts/check-includes.py")
                    continue
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if os.path.exists(os.path.join(root, inc)):
                            target = inc
                        elif os.path.exists(os.path.join(os.path.dirname(os.path.join(root, path)), inc)):
                            target = os.path.relpath(os.path.join(os.path.dirname(path), inc))
                        else:
                            bad.append(f"{path}:{lineno}: includes \"{inc}\", which does not exist")
                            continue
                        dst = folder_of(target)
                        if dst is None or dst == src:
                            continue  # a file of its own folder (or outside the checked tree)
                        if dst == "kernels" and target.count("/") > 1:
                            bad.append(f"{path}:{lineno}: includes {target}: only kernels/ may include a "
                                       f"backend's own header; use the ops table (kernels/ops.h)")
                            continue
                        if dst not in LEVELS:
                            bad.append(f"{path}:{lineno}: includes {target}: folder {dst} has no level")
                        elif LEVELS[dst] >= LEVELS[src]:
                            way = "sideways" if LEVELS[dst] == LEVELS[src] else "upward"
                            bad.append(f"{path}:{lineno}: includes {target}: {src} may not include {dst} "
                                       f"(an arrow {way}; see scripts/check-includes.py)")
    for line in bad:
        print(line)
    print(f"include arrows: {files} files, {len(bad)} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
