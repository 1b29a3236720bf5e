#!/usr/bin/env python3
"""llm.c's side of scripts/bench/gpu.sh: runs karpathy/llm.c's train_gpt2cu
(built by gpu.sh) on random GPT-2 tokens and prints one JSON line in the form
of gpu_train's and gpu_torch.py's.

  llmc_run.py --bin TRAIN_GPT2CU --model gpt2-124m|gpt2-350m [--batch B]
              [--steps N] [--warmup W] [--workdir DIR] [-- EXTRA llm.c FLAGS]
  llmc_run.py --parse LOG --model M --batch B [--warmup W]   (the parser alone)

The model comes from llm.c's own descriptor (-e d12 / d24: random GPT-2 weights,
its padded vocabulary 50304), the data from a token file written here in llm.c's
format (runtime/data/tokens.c reads the same: a 256 x int32 header, magic
20240520, version 1, token count; then uint16 tokens), uniform in [0, 50257).
Everything else is llm.c's default (bf16, recompute of the GELU, no cuDNN, one
GPU) except: no sampling (-s 0), one validation batch (-m 1; llm.c evaluates at
step 0 and at the end, outside its timed step), weight decay 0.1 (ours).

llm.c times each step with CUDA events and prints "step k/N | ... | X ms | ...
| Y tok/s" (Y a bias-corrected moving average). The row takes the median of
X over the steps after the first W, as the other rows do (items_per_s =
B*T / median), and keeps llm.c's own last Y (llmc_tok_s) and its "device
memory usage" line (total - free after it allocated everything,
mem_measured_b). FLOPs per token: flops.py, dtrun's formula on the unpadded
vocabulary, as for every row."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import json

from flops import per_item

STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) .*\| ([0-9.]+) ms \|.*\| ([0-9.]+) tok/s")
MEM = re.compile(r"^device memory usage: (\d+) MiB / (\d+) MiB")
DEPTH = {"gpt2-124m": "d12", "gpt2-350m": "d24"}
T = 1024


def write_tokens(path, n):
    """llm.c's token file: header int32[256] = (20240520, 1, n, 0...), n uint16."""
    header = [20240520, 1, n] + [0] * 253
    try:
        import numpy as np
        toks = np.random.default_rng(7).integers(0, 50257, size=n, dtype=np.uint16).tobytes()
    except ImportError:
        import array
        import random
        rnd = random.Random(7)
        toks = array.array("H", (rnd.randrange(50257) for _ in range(n))).tobytes()
    with open(path, "wb") as f:
        f.write(b"".join(v.to_bytes(4, "little", signed=True) for v in header))
        f.write(toks)


def parse(text, model, B, warmup):
    """The row from llm.c's output; raises ValueError when it has too few steps."""
    ms, last_tok_s, loss, mem = [], None, None, None
    for line in text.splitlines():
        m = STEP.match(line)
        if m:
            if int(m.group(1)) > warmup:
                ms.append(float(m.group(4)))
            loss, last_tok_s = float(m.group(3)), float(m.group(5))
            continue
        m = MEM.match(line)
        if m:
            mem = int(m.group(1)) * 2**20
    if not ms:
        raise ValueError(f"no timed step lines in llm.c's output (want more than {warmup} steps)")
    med = statistics.median(ms) / 1e3
    return {"impl": "llm.c", "model": model, "kind": "gpt", "B": B, "T": T, "precision": "bf16",
            "step_ms": round(med * 1e3, 3), "items_per_s": round(B * T / med, 1), "unit": "tok",
            "flops_per_item": per_item(model), "loss": loss, "llmc_tok_s": last_tok_s,
            "mem_measured_b": mem,
            # llm.c put m, v or the master weights in managed memory: not a fair timing
            "llmc_managed_fallback": "Fell back to cudaMallocManaged" in text}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin")
    ap.add_argument("--parse", metavar="LOG")
    ap.add_argument("--model", required=True, choices=sorted(DEPTH))
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workdir", default=".")
    ap.add_argument("extra", nargs="*", help="more llm.c flags, after --")
    a = ap.parse_args()
    B = a.batch or {"gpt2-124m": 16, "gpt2-350m": 8}[a.model]
    if a.parse:
        print(json.dumps(parse(open(a.parse).read(), a.model, B, a.warmup)))
        return
    if not a.bin:
        sys.exit("llmc_run.py: --bin or --parse is needed")
    tokens = os.path.join(a.workdir, "llmc_tokens.bin")
    if not os.path.exists(tokens):
        write_tokens(tokens, 4 * 1024 * 1024)
    cmd = [os.path.abspath(a.bin), "-i", tokens, "-j", tokens, "-e", DEPTH[a.model], "-b", str(B),
           "-t", str(T), "-x", str(a.warmup + a.steps), "-s", "0", "-m", "1", "-v", "1000000",
           "-c", "0.1"] + a.extra
    print("# " + " ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, cwd=a.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stderr.write(p.stdout)
    if p.returncode != 0:
        last = [l for l in p.stdout.splitlines() if l.strip()][-1:] or ["no output"]
        sys.exit(f"llmc_run.py: train_gpt2cu exited {p.returncode}: {last[0]}")
    row = parse(p.stdout, a.model, B, a.warmup)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
