#!/usr/bin/python3
"""sft_torch.py — SFT shards written here and PyTorch's answers about them
(test/integration/sft_pack.sh).

  sft_torch.py write OUT.bin --samples N --vocab V [--min-len 2 --max-len 40
                 --seed 0 --width 2 --no-targets K]
      N random samples in dtrun's SFT shard format (man dtrun-job(5), SFT
      SHARDS): lengths uniform in [min-len, max-len], a prompt of ids uniform
      below V (mask 0) then a completion (mask 1) from a random cut on, each
      of its ids (3 x the one before + 1) mod V, learnable (the first
      token's mask always 0); the first K samples (--no-targets) have no
      completion at all. --width 4 writes uint32 ids.
  sft_torch.py loss DIR SHARD --seq-len T [--truncate] [--packed-no-mask]
      the mean cross-entropy over the masked-in targets of every sample of
      SHARD, each sample run alone through the Hugging Face folder DIR's model
      (a GPT-2 of hf_gpt2.py or a Llama of hf_llama.py): the loss dtrun's
      document-masked packing must give. --truncate: samples longer than T
      cut to their first T tokens (data.long_samples: truncate). With
      --packed-no-mask the samples packed as dtrun packs them (first fit into
      windows of T) and each window run as one sequence, attention crossing
      samples and positions running on: what a loader without the document
      mask would give (the test shows it differs). To 9 decimals.
  sft_torch.py windows SHARD --seq-len T [--truncate]
      dtrun's packing: the number of windows and of masked-in targets.

Runs under Debian's python3-torch (/usr/bin/python3)."""
import argparse
import json
import os
import random
import struct
import sys

MAGIC, VERSION = 20261128, 1


def write(a):
    rng = random.Random(a.seed)
    ids, mask, starts = [], [], [0]
    for s in range(a.samples):
        n = rng.randint(a.min_len, a.max_len)
        cut = n if s < a.no_targets else rng.randint(1, n - 1) if n > 1 else 1
        x = [rng.randrange(a.vocab) for _ in range(cut)]
        for _ in range(n - cut):  # a completion a model can learn: each token from the one before
            x.append((3 * x[-1] + 1) % a.vocab)
        ids += x
        mask += [0] * cut + [1] * (n - cut)
        starts.append(len(ids))
    head = struct.pack("<5i", MAGIC, VERSION, len(ids), a.samples, a.width) + b"\0" * (1024 - 20)
    fmt = "<%d%s" % (len(ids), "H" if a.width == 2 else "I")
    with open(a.out, "wb") as f:
        f.write(head + struct.pack(fmt, *ids) + bytes(mask) + struct.pack("<%dq" % len(starts), *starts))


def read(path):
    """The samples of a shard: [(ids, mask)]."""
    blob = open(path, "rb").read()
    magic, version, n, s, width = struct.unpack("<5i", blob[:20])
    if magic != MAGIC or version != VERSION:
        sys.exit(f"{path}: not an SFT shard")
    at = 1024
    ids = struct.unpack("<%d%s" % (n, "H" if width == 2 else "I"), blob[at:at + n * width])
    at += n * width
    mask = blob[at:at + n]
    starts = struct.unpack("<%dq" % (s + 1), blob[at + n:at + n + 8 * (s + 1)])
    return [(list(ids[starts[k]:starts[k + 1]]), list(mask[starts[k]:starts[k + 1]])) for k in range(s)]


def samples_of(a):
    out = []
    for ids, mask in read(a.shard):
        if len(ids) > a.seq_len:
            if not a.truncate:
                sys.exit(f"{a.shard}: a sample of {len(ids)} tokens, longer than --seq-len {a.seq_len}")
            ids, mask = ids[:a.seq_len], mask[:a.seq_len]
        out.append((ids, mask))
    return out


def pack(samples, T):
    """dtrun's packing (runtime/data/sft.c): first fit, in order."""
    windows, cur, used = [], [], T
    for x in samples:
        if used + len(x[0]) > T:
            cur = []
            windows.append(cur)
            used = 0
        cur.append(x)
        used += len(x[0])
    return windows


def targets_of(ids, mask):
    return [ids[t + 1] if t + 1 < len(ids) and mask[t + 1] else -100 for t in range(len(ids))]


def load(d):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    kind = json.load(open(os.path.join(d, "config.json")))["model_type"]
    if kind == "llama":
        import hf_llama
        return hf_llama.load(d)
    import hf_gpt2
    return hf_gpt2.load(d)


def loss(a):
    import torch
    import torch.nn.functional as F
    m, cfg = load(a.dir)
    samples = samples_of(a)
    seqs = samples
    if a.packed_no_mask:
        seqs = []
        for w in pack(samples, a.seq_len):
            ids, tgt = [], []
            for x in w:
                ids += x[0]
                tgt += targets_of(*x)
            seqs.append((ids, tgt))
    total, count = 0.0, 0
    with torch.no_grad():
        for x in seqs:
            ids = x[0]
            tgt = x[1] if a.packed_no_mask else targets_of(*x)
            y = torch.tensor(tgt)
            if (y >= 0).sum() == 0:
                continue
            logits = m(torch.tensor([ids]))[0]
            total += F.cross_entropy(logits.double(), y, ignore_index=-100, reduction="sum").item()
            count += int((y >= 0).sum())
    print(f"{total / count:.9f}")


def windows(a):
    samples = samples_of(a)
    n = sum(len(targets_of(*x)) - targets_of(*x).count(-100) for x in samples)
    print(len(pack(samples, a.seq_len)), n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("--samples", type=int, required=True)
    w.add_argument("--vocab", type=int, required=True)
    w.add_argument("--min-len", type=int, default=2)
    w.add_argument("--max-len", type=int, default=40)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--width", type=int, choices=(2, 4), default=2)
    w.add_argument("--no-targets", type=int, default=0)
    for name in ("loss", "windows"):
        p = sub.add_parser(name)
        if name == "loss":
            p.add_argument("dir")
        p.add_argument("shard")
        p.add_argument("--seq-len", type=int, required=True)
        p.add_argument("--truncate", action="store_true")
        if name == "loss":
            p.add_argument("--packed-no-mask", action="store_true")
    a = ap.parse_args()
    {"write": write, "loss": loss, "windows": windows}[a.cmd](a)


if __name__ == "__main__":
    main()
