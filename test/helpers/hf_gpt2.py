#!/usr/bin/python3
"""hf_gpt2.py — a GPT-2 made in PyTorch, in Hugging Face's folder layout, and
PyTorch's answers about it (test/integration/init_from.sh, generate.sh, eval.sh).

  hf_gpt2.py make DIR [--n-layer 2 --n-embd 64 --n-head 4 --vocab 256
                       --n-positions 64 --seed 0 --shards 1]
      random weights (not GPT-2's init: layernorms and biases random too, so a
      wrong name or transpose cannot hide), written as Hugging Face writes
      them: config.json with GPT2Config's keys, model.safetensors (or
      --shards N files and model.safetensors.index.json) under transformers'
      names, Conv1D weights [in, out], the causal-mask buffers
      transformer.h.N.attn.bias that older transformers saved, no lm_head
      (tied). The safetensors files are written by hand: 8-byte little-endian
      header length, JSON header, raw little-endian data.
  hf_gpt2.py loss DIR VAL.bin
      the mean cross-entropy per token over dtrun's validation dump
      (DTRUN_DUMP_VAL), to 9 decimals.
  hf_gpt2.py loss-file DIR FILE --seq-len T [--batch 8]
      the mean loss over a byte-level FILE's windows as `dtrun eval` takes
      them (non-overlapping windows of T + 1 bytes, stride T).
  hf_gpt2.py greedy DIR --prompt-ids 1,2,3 --n 50
      greedy decoding (argmax, ties to the lowest id as torch.argmax), the
      new ids comma-separated, recomputing the whole prefix each token (no
      cache: the reference the KV cache must match); on stderr the smallest
      margin between the best and second-best logit (how far from a tie).

The model is scripts/export_check.py's plain GPT-2 (pre-LN, eps 1e-5, tanh
GELU, tied head): the same one the export test loads dtrun's exports into.
Runs under Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from export_check import GPT2, read_safetensors, read_val  # noqa: E402


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().float().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_weights(d, sd, shards):
    """sd into folder d: model.safetensors, or (shards > 1) that many files and
    the index naming each tensor's file, as Hugging Face shards a model."""
    if shards <= 1:
        write_safetensors(os.path.join(d, "model.safetensors"), sd)
        return
    names, weight_map = list(sd), {}
    per = -(-len(names) // shards)
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: sd[n] for n in names[s * per:(s + 1) * per]}
        write_safetensors(os.path.join(d, fname), part)
        weight_map.update({n: fname for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.numel() * 4 for t in sd.values())}, "weight_map": weight_map}, f,
                  indent=2)


def read_weights(d):
    """Every tensor of folder d, from model.safetensors or its shards."""
    files = [os.path.join(d, "model.safetensors")]
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted({os.path.join(d, f) for f in json.load(open(idx))["weight_map"].values()})
    sd = {}
    for f in files:
        sd.update(read_safetensors(f))
    return sd


def make(a):
    torch.manual_seed(a.seed)
    m = GPT2(a.vocab, a.n_positions, a.n_embd, a.n_layer, a.n_head, 4 * a.n_embd)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.05 * torch.randn_like(p))
            elif "wte" in name:  # small: a tied head with large wte only repeats the last token
                p.copy_(0.05 * torch.randn_like(p))
            elif "wpe" in name:
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(0.5 * torch.randn_like(p) / p.shape[0] ** 0.5)
    sd = dict(m.state_dict())
    for i in range(a.n_layer):  # the buffer older transformers saved with the weights
        sd[f"transformer.h.{i}.attn.bias"] = torch.ones(a.n_positions, a.n_positions).tril().view(
            1, 1, a.n_positions, a.n_positions)
    os.makedirs(a.dir, exist_ok=True)
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": a.vocab,
           "n_positions": a.n_positions, "n_ctx": a.n_positions, "n_embd": a.n_embd, "n_layer": a.n_layer,
           "n_head": a.n_head, "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
           "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "initializer_range": 0.02,
           "bos_token_id": a.vocab - 1, "eos_token_id": a.vocab - 1, "tie_word_embeddings": True}
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_weights(a.dir, sd, a.shards)

def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    sd = {k: v for k, v in read_weights(d).items() if not k.endswith(".attn.bias")}
    n_inner = cfg.get("n_inner") or 4 * cfg["n_embd"]
    m = GPT2(cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["n_layer"], cfg["n_head"], n_inner)
    m.load_state_dict(sd, strict=True)
    m.eval()
    return m, cfg


def loss(a):
    m, cfg = load(a.dir)
    print(f"{val_loss(m, cfg['vocab_size'], a.val):.9f}")


def val_loss(m, vocab, path):
    """The mean token loss of a validation dump (export_check.read_val), 16 rows at a time."""
    tokens, targets = read_val(path)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, tokens.shape[0], 16):
            logits = m(tokens[i:i + 16])
            total += F.cross_entropy(logits.reshape(-1, vocab).double(), targets[i:i + 16].reshape(-1),
                                     reduction="sum").item()
            count += targets[i:i + 16].numel()
    return total / count


def windows_loss(m, vocab, path, T, batch):
    """dtrun eval's windows of a byte-level file: window i is bytes
    [i T, i T + T] (inputs the first T, targets the last T), (n - 1) // T of
    them, at most 64 batches of `batch`; the mean loss per token."""
    data = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
    n = min((data.numel() - 1) // T, 64 * batch)
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, 16):
            rows = range(i, min(i + 16, n))
            x = torch.stack([data[r * T:r * T + T] for r in rows])
            y = torch.stack([data[r * T + 1:r * T + T + 1] for r in rows])
            total += F.cross_entropy(m(x).reshape(-1, vocab).double(), y.reshape(-1), reduction="sum").item()
    return total / (n * T)


def loss_file(a):
    m, cfg = load(a.dir)
    print(f"{windows_loss(m, cfg['vocab_size'], a.file, a.seq_len, a.batch):.9f}")


def greedy(a):
    m, _ = load(a.dir)
    ids = [int(x) for x in a.prompt_ids.split(",")]
    out, margin = [], float("inf")
    with torch.no_grad():
        for _ in range(a.n):
            logits = m(torch.tensor([ids]))[0, -1]
            top = logits.topk(2).values
            margin = min(margin, float(top[0] - top[1]))
            nxt = int(torch.argmax(logits))
            ids.append(nxt)
            out.append(nxt)
    print(",".join(map(str, out)))
    # how far from a tie the closest choice was: summation order moves logits ~1e-6
    print(f"smallest top-1 - top-2 logit margin {margin:.3g}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("dir")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--n-positions", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", type=int, default=1)
    p = sub.add_parser("loss")
    p.add_argument("dir")
    p.add_argument("val")
    p = sub.add_parser("loss-file")
    p.add_argument("dir")
    p.add_argument("file")
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch", type=int, default=8)
    p = sub.add_parser("greedy")
    p.add_argument("dir")
    p.add_argument("--prompt-ids", required=True)
    p.add_argument("--n", type=int, default=50)
    a = ap.parse_args()
    {"make": make, "loss": loss, "loss-file": loss_file, "greedy": greedy}[a.cmd](a)


if __name__ == "__main__":
    main()
