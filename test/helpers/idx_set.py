#!/usr/bin/env python3
"""idx_set.py DIR [--train 64 --val 16 --size 8 --classes 10 --seed 1] —
random uint8 IDX images and labels under torchvision's names
(train-images-idx3-ubyte, train-labels-idx1-ubyte, val-...), for the ViT tests."""
import argparse
import os
import random
import struct

ap = argparse.ArgumentParser()
ap.add_argument("dir")
for k, v in (("train", 64), ("val", 16), ("size", 8), ("classes", 10), ("seed", 1)):
    ap.add_argument(f"--{k}", type=int, default=v)
a = ap.parse_args()
rng = random.Random(a.seed)
os.makedirs(a.dir, exist_ok=True)
for split, n in (("train", a.train), ("val", a.val)):
    with open(os.path.join(a.dir, f"{split}-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, a.size, a.size))
        f.write(bytes(rng.randrange(256) for _ in range(n * a.size * a.size)))
    with open(os.path.join(a.dir, f"{split}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n))
        f.write(bytes(rng.randrange(a.classes) for _ in range(n)))
