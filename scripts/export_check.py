#!/usr/bin/python3
"""export_check.py — does a `dtrun export` of a GPT load into plain PyTorch and
give dtrun's validation loss?

usage: export_check.py MODEL.safetensors VAL.bin --n-head H --expect LOSS [--tol 1e-4]

MODEL.safetensors: what `dtrun export CKPT MODEL.safetensors` wrote (Hugging
Face GPT-2 names, Conv1D weights [in, out], the tied LM head omitted).
VAL.bin: the validation samples dtrun evaluated (DTRUN_DUMP_VAL, engine.h):
"DTVAL001", int32 N, int32 T, int32 tokens[N][T], int32 targets[N][T].
LOSS: dtrun's reported validation loss (the mean cross-entropy per token).

The file is read with a small parser (an 8-byte header length, a JSON header,
raw little-endian data: the safetensors format) because Debian ships no
`safetensors` package; the model is a minimal GPT-2 with the names
transformers uses (pre-LayerNorm blocks, eps 1e-5, GELU with the tanh
approximation, causal attention, LM head tied to wte), so a state dict that
loads here with strict=True also loads into GPT2LMHeadModel. Prints the loss
and exits 0 when |loss - LOSS| <= tol, 1 otherwise (2 on a malformed input).
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        sys.exit(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        sys.exit(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(blob[8:8 + n])
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        dtype = DTYPES.get(t["dtype"])
        if dtype is None or not 0 <= begin <= end <= len(data):
            sys.exit(f"{path}: tensor {name}: unsupported dtype {t['dtype']} or bad offsets")
        tensor = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        out[name] = tensor.reshape(t["shape"]).float()
    return out


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight [in, out], y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = Conv1D(d, 3 * d)
        self.c_proj = Conv1D(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.n_head)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.c_fc = Conv1D(d, d_ff)
        self.c_proj = Conv1D(d_ff, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, n_head, d_ff):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, n_head)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d, d_ff)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, vocab, n_ctx, d, n_layer, n_head, d_ff):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, d)
        self.transformer.wpe = nn.Embedding(n_ctx, d)
        self.transformer.h = nn.ModuleList(Block(d, n_head, d_ff) for _ in range(n_layer))
        self.transformer.ln_f = nn.LayerNorm(d, eps=1e-5)

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
        for block in t.h:
            x = block(x)
        return t.ln_f(x) @ t.wte.weight.t()  # the LM head is tied to wte


def read_val(path):
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != b"DTVAL001":
        sys.exit(f"{path}: not a dtrun validation dump (DTRUN_DUMP_VAL)")
    n, t = struct.unpack("<ii", blob[8:16])
    ints = torch.frombuffer(bytearray(blob[16:]), dtype=torch.int32).long()
    if ints.numel() != 2 * n * t:
        sys.exit(f"{path}: {ints.numel()} ints, want 2 x {n} x {t}")
    return ints[:n * t].view(n, t), ints[n * t:].view(n, t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("val")
    ap.add_argument("--n-head", type=int, required=True)
    ap.add_argument("--expect", type=float, required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    sd = read_safetensors(a.model)
    vocab, d = sd["transformer.wte.weight"].shape
    n_ctx = sd["transformer.wpe.weight"].shape[0]
    n_layer = len({k.split(".")[2] for k in sd if k.startswith("transformer.h.")})
    d_ff = sd["transformer.h.0.mlp.c_fc.weight"].shape[1]
    model = GPT2(vocab, n_ctx, d, n_layer, a.n_head, d_ff)
    model.load_state_dict(sd, strict=True)  # every name and shape, nothing left over
    model.eval()
    tokens, targets = read_val(a.val)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, tokens.shape[0], 16):
            logits = model(tokens[i:i + 16])
            total += F.cross_entropy(logits.reshape(-1, vocab), targets[i:i + 16].reshape(-1),
                                     reduction="sum", ignore_index=-1).item()
            count += targets[i:i + 16].numel()
    loss = total / count
    diff = abs(loss - a.expect)
    print(f"pytorch val_loss {loss:.6f} over {tokens.shape[0]} x {tokens.shape[1]} tokens, dtrun {a.expect:.6f}, "
          f"|diff| {diff:.2e} (n_layer {n_layer}, d_model {d}, vocab {vocab})")
    sys.exit(0 if diff <= a.tol else 1)


if __name__ == "__main__":
    main()
