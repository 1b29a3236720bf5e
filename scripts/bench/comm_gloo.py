#!/usr/bin/python3
"""comm_gloo.py — torch.distributed gloo all_reduce or all_to_all(v), timed like comm_bench.

Run one process per rank with RANK, WORLD_SIZE and BENCH_INIT (an init_method
URL: file:///tmp/x or tcp://127.0.0.1:29555). Rank 0 prints the same table as
comm_bench: size(B) count type time(us) algbw(GB/s) busbw(GB/s), the median of
--iters calls, each bracketed by a barrier.

    comm_gloo.py [--op all_reduce|all_to_all|all_to_allv] [--sizes 1M,16M,64M] [--iters N] [--warmup N]

all_to_all(v) is all_to_all_single with comm_bench's splits (a2a_share: the
same uneven shares), size bytes sent per rank.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip()
    if s[-1].upper() in mult:
        return int(float(s[:-1]) * mult[s[-1].upper()])
    return int(s)


def a2a_share(n, p, s, d):
    """comm_bench.c's a2a_share: what rank s sends rank d out of n elements."""
    ws = [1 + (s + 2 * q) % p for q in range(p)]
    w = sum(ws)
    return n - (n // w) * (w - ws[d]) if d == p - 1 else n // w * ws[d]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="all_reduce")
    ap.add_argument("--sizes", default="1M,16M,64M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # One core per rank, like the dtrun side: no intra-op thread pool fighting
    # the other rank for the same cores.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=os.environ["BENCH_INIT"], rank=rank,
                            world_size=world)
    factor = 2.0 * (world - 1) / world if args.op == "all_reduce" else (world - 1) / world
    if rank == 0:
        print(f"# torch {torch.__version__} gloo {args.op}, {world} ranks, dtype f32")
        print(f"{'size(B)':>12} {'count':>12} {'type':>6} {'time(us)':>12} "
              f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12}")
    for size in (parse_size(s) for s in args.sizes.split(",")):
        n = size // 4
        t = torch.ones(n, dtype=torch.float32)
        if args.op != "all_reduce":
            even = args.op == "all_to_all"
            sc = [n // world if even else a2a_share(n, world, rank, q) for q in range(world)]
            rc = [n // world if even else a2a_share(n, world, q, rank) for q in range(world)]
            t = torch.ones(sum(sc), dtype=torch.float32)
            out = torch.empty(sum(rc), dtype=torch.float32)
        times = []
        for k in range(-args.warmup, args.iters):
            dist.barrier()
            t0 = time.perf_counter()
            if args.op == "all_reduce":
                dist.all_reduce(t)
            else:
                dist.all_to_all_single(out, t, output_split_sizes=rc, input_split_sizes=sc)
            dt = time.perf_counter() - t0
            if k >= 0:
                times.append(dt)
        med = sorted(times)[len(times) // 2]
        algbw = n * 4 / med / 1e9
        if rank == 0:
            print(f"{n * 4:>12} {n:>12} {'float':>6} {med * 1e6:>12.1f} "
                  f"{algbw:>12.2f} {algbw * factor:>12.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
