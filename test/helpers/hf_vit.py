#!/usr/bin/python3
"""hf_vit.py — a ViT made in PyTorch, in Hugging Face's folder layout
(ViTForImageClassification's names), and PyTorch's answers about it
(test/integration/init_from_vit.sh, classify.sh).

  hf_vit.py make DIR [--layers 2 --hidden 32 --heads 4 --inner 64 --image 8
                      --patch 4 --channels 1 --classes 10 --act gelu
                      --eps 1e-12 --seed 0 --shards 1 --mean M,.. --std S,..
                      --no-labels]
      random weights (layernorms and biases random too, so a wrong name,
      a swapped query/key or a transposed patch cannot hide), written as
      transformers' save_pretrained writes them: config.json with ViTConfig's
      keys (id2label with names "class-K", unless --no-labels),
      preprocessor_config.json (ViTImageProcessor's: image_mean, image_std),
      model.safetensors (or --shards N files and model.safetensors.index.json).
  hf_vit.py loss DIR IMAGES.idx LABELS.idx
      the mean cross-entropy over IDX images normalised as dtrun's data loader
      does ((x / 255 - 0.2860) / 0.3530), to 9 decimals.
  hf_vit.py topk DIR FILE... [--k 5] [--mean M,..] [--std S,..]
      for each image file (PNG and PPM/PGM read by hand below) the line dtrun
      classify prints, "FILE<TAB>PROB INDEX LABEL<TAB>..." — the preprocessing dtrun classify
      documents (channels converted, bilinear resize without antialiasing as
      torch's interpolate(align_corners=False), x / 255, (x - mean) / std with
      the folder's preprocessor_config.json or the given mean/std).
  hf_vit.py accuracy DIR IMAGES.idx LABELS.idx [--mean .. --std ..]
      top-1 and top-5 correct counts over the IDX images, preprocessed the same.

The forward is Hugging Face's ViT written out in plain torch (the machine has
no transformers): pre-LN blocks, separate query/key/value, exact erf GELU
(hidden_act "gelu") or tanh ("gelu_pytorch_tanh"), layernorm eps from the
config, final layernorm, classifier on the class token.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_gpt2 import read_weights, write_weights  # noqa: E402

DTRUN_MEAN, DTRUN_STD = 0.2860, 0.3530


class SelfAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)


class Output(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.dense = nn.Linear(i, o)


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attention = SelfAttention(d)
        self.output = Output(d, d)


class Layer(nn.Module):
    def __init__(self, d, inner, eps):
        super().__init__()
        self.layernorm_before = nn.LayerNorm(d, eps=eps)
        self.attention = Attention(d)
        self.layernorm_after = nn.LayerNorm(d, eps=eps)
        self.intermediate = Output(d, inner)
        self.output = Output(inner, d)


class PatchEmbeddings(nn.Module):
    def __init__(self, ch, d, p):
        super().__init__()
        self.projection = nn.Conv2d(ch, d, p, stride=p)


class Embeddings(nn.Module):
    def __init__(self, ch, d, p, n_patches):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.position_embeddings = nn.Parameter(torch.zeros(1, n_patches + 1, d))
        self.patch_embeddings = PatchEmbeddings(ch, d, p)


class Encoder(nn.Module):
    def __init__(self, n, d, inner, eps):
        super().__init__()
        self.layer = nn.ModuleList([Layer(d, inner, eps) for _ in range(n)])


class ViTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, p, s = cfg["hidden_size"], cfg["patch_size"], cfg["image_size"]
        eps = cfg.get("layer_norm_eps", 1e-12)
        self.embeddings = Embeddings(cfg.get("num_channels", 3), d, p, (s // p) ** 2)
        self.encoder = Encoder(cfg["num_hidden_layers"], d, cfg["intermediate_size"], eps)
        self.layernorm = nn.LayerNorm(d, eps=eps)


class ViTForImageClassification(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.vit = ViTModel(cfg)
        self.classifier = nn.Linear(cfg["hidden_size"], len(cfg["id2label"]))

    def gelu(self, x):
        act = self.cfg.get("hidden_act", "gelu")
        return F.gelu(x) if act == "gelu" else 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    def forward(self, img):
        v, nh = self.vit, self.cfg["num_attention_heads"]
        e = v.embeddings
        x = e.patch_embeddings.projection(img).flatten(2).transpose(1, 2)
        x = torch.cat([e.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + e.position_embeddings
        B, T, C = x.shape
        hs = C // nh
        for L in v.encoder.layer:
            h = L.layernorm_before(x)
            a = L.attention.attention
            q, k, val = (t(h).view(B, T, nh, hs).transpose(1, 2) for t in (a.query, a.key, a.value))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hs), dim=-1)
            y = (att @ val).transpose(1, 2).reshape(B, T, C)
            x = x + L.attention.output.dense(y)
            x = x + L.output.dense(self.gelu(L.intermediate.dense(L.layernorm_after(x))))
        return self.classifier(v.layernorm(x)[:, 0])


def make(a):
    torch.manual_seed(a.seed)
    labels = {str(k): f"class-{k}" for k in range(a.classes)} if not a.no_labels else {
        str(k): f"LABEL_{k}" for k in range(a.classes)}
    cfg = {"architectures": ["ViTForImageClassification"], "model_type": "vit", "hidden_size": a.hidden,
           "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "intermediate_size": a.inner,
           "hidden_act": a.act, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
           "initializer_range": 0.02, "layer_norm_eps": a.eps, "image_size": a.image, "patch_size": a.patch,
           "num_channels": a.channels, "qkv_bias": True, "encoder_stride": a.patch, "id2label": labels,
           "label2id": {v: int(k) for k, v in labels.items()}, "torch_dtype": "float32",
           "transformers_version": "4.35.0"}
    if a.no_labels:
        del cfg["label2id"]
    m = ViTForImageClassification(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "layernorm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.05 * torch.randn_like(p))
            elif "cls_token" in name or "position_embeddings" in name:
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p[0].numel() ** 0.5)
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    mean = [float(x) for x in a.mean.split(",")] if a.mean else [0.5] * a.channels
    std = [float(x) for x in a.std.split(",")] if a.std else [0.5] * a.channels
    pre = {"do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": mean, "image_std": std,
           "image_processor_type": "ViTImageProcessor", "resample": 2, "rescale_factor": 1 / 255,
           "size": {"height": a.image, "width": a.image}}
    with open(os.path.join(a.dir, "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=2)
    write_weights(a.dir, dict(m.state_dict()), a.shards)

def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    m = ViTForImageClassification(cfg)
    m.load_state_dict(read_weights(d), strict=True)
    m.eval()
    return m, cfg


def read_idx(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 0x803:
        r, c = struct.unpack(">II", raw[8:16])
        return torch.tensor(list(raw[16:16 + n * r * c]), dtype=torch.uint8).view(n, r, c)
    return torch.tensor(list(raw[8:8 + n]), dtype=torch.long)


def loss(a):
    m, _ = load(a.dir)
    x = (read_idx(a.images).float().unsqueeze(1) / 255 - DTRUN_MEAN) / DTRUN_STD
    y = read_idx(a.labels)
    with torch.no_grad():
        l = F.cross_entropy(m(x).double(), y, reduction="mean").item()
    print(f"{l:.9f}")


# ---- image files, as dtrun classify reads them ----

def read_png(path):
    """8-bit PNG (gray, gray+alpha, RGB, RGBA; not interlaced, not paletted) as [H, W, ch] uint8."""
    raw = open(path, "rb").read()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, w = 8, b"", None
    while pos < len(raw):
        (n,) = struct.unpack(">I", raw[pos:pos + 4])
        kind, body = raw[pos + 4:pos + 8], raw[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, inter = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and inter == 0 and ctype in (0, 2, 4, 6)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    data, stride = zlib.decompress(idat), w * ch
    out, prev = bytearray(), bytearray(stride)
    for y in range(h):
        f, line = data[y * (stride + 1)], bytearray(data[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - ch] if i >= ch else 0
            up, ul = prev[i], prev[i - ch] if i >= ch else 0
            if f == 1: line[i] = (line[i] + left) & 255
            elif f == 2: line[i] = (line[i] + up) & 255
            elif f == 3: line[i] = (line[i] + (left + up) // 2) & 255
            elif f == 4:
                p = left + up - ul
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else ul)) & 255
        out += line
        prev = line
    return torch.tensor(list(out), dtype=torch.uint8).view(h, w, ch)


def write_png(path, img):
    """img [H, W, ch] uint8 (ch 1, 3 or 4), filter 0, no interlace."""
    h, w, ch = img.shape
    rows = b"".join(b"\x00" + bytes(img[y].flatten().tolist()) for y in range(h))
    def chunk(k, b):
        return struct.pack(">I", len(b)) + k + b + struct.pack(">I", zlib.crc32(k + b) & 0xffffffff)
    ctype = {1: 0, 2: 4, 3: 2, 4: 6}[ch]
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def read_pnm(path):
    raw = open(path, "rb").read()
    fields, pos = [], 0
    while len(fields) < 4:
        while raw[pos:pos + 1].isspace():
            pos += 1
        if raw[pos:pos + 1] == b"#":
            while raw[pos:pos + 1] not in (b"\n", b""):
                pos += 1
            continue
        start = pos
        while not raw[pos:pos + 1].isspace():
            pos += 1
        fields.append(raw[start:pos])
    pos += 1
    ch = 3 if fields[0] == b"P6" else 1
    w, h = int(fields[1]), int(fields[2])
    return torch.tensor(list(raw[pos:pos + w * h * ch]), dtype=torch.uint8).view(h, w, ch)


def read_image(path):
    return read_png(path) if open(path, "rb").read(4) == b"\x89PNG" else read_pnm(path)


def preprocess(img, cfg, mean, std):
    """[H, W, ch] uint8 -> [model ch, S, S] float, as dtrun classify."""
    want, S = cfg.get("num_channels", 3), cfg["image_size"]
    x = img.float()
    ch = x.shape[2]
    if ch in (2, 4):  # alpha dropped
        x, ch = x[:, :, :ch - 1], ch - 1
    if want == 1 and ch == 3:  # luminance, ITU-R 601 (PIL's "L")
        x = (x[:, :, 0:1] * 299 + x[:, :, 1:2] * 587 + x[:, :, 2:3] * 114) / 1000
    elif want == 3 and ch == 1:
        x = x.expand(-1, -1, 3)
    x = x.permute(2, 0, 1).unsqueeze(0) / 255
    if x.shape[2:] != (S, S):
        x = F.interpolate(x, size=(S, S), mode="bilinear", align_corners=False)
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return ((x - m) / s)[0]


def norm_of(a, d):
    pre = os.path.join(d, "preprocessor_config.json")
    if a.mean:
        return [float(v) for v in a.mean.split(",")], [float(v) for v in a.std.split(",")]
    p = json.load(open(pre))
    return p["image_mean"], p["image_std"]


def topk(a):
    m, cfg = load(a.dir)
    mean, std = norm_of(a, a.dir)
    x = torch.stack([preprocess(read_image(f), cfg, mean, std) for f in a.files])
    with torch.no_grad():
        prob = torch.softmax(m(x).double(), dim=-1)
    k = min(a.k, prob.shape[1])
    for f, row in zip(a.files, prob):
        v, i = row.topk(k)
        names = [cfg["id2label"].get(str(int(c))) if "id2label" in cfg else None for c in i]
        print(f + "".join(f"\t{float(p):.6f} {int(c)}" + (f" {n}" if n else "") for p, c, n in zip(v, i, names)))


def accuracy(a):
    m, cfg = load(a.dir)
    mean, std = norm_of(a, a.dir)
    imgs, y = read_idx(a.images), read_idx(a.labels)
    x = torch.stack([preprocess(im.unsqueeze(2), cfg, mean, std) for im in imgs])
    with torch.no_grad():
        logits = m(x)
    top = logits.topk(min(5, logits.shape[1]), dim=1).indices
    print(int((top[:, 0] == y).sum()), int((top == y.unsqueeze(1)).any(dim=1).sum()), len(y))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("dir")
    for k, v in (("layers", 2), ("hidden", 32), ("heads", 4), ("inner", 64), ("image", 8), ("patch", 4),
                 ("channels", 1), ("classes", 10), ("seed", 0), ("shards", 1)):
        p.add_argument(f"--{k}", type=int, default=v)
    p.add_argument("--act", default="gelu")
    p.add_argument("--eps", type=float, default=1e-12)
    p.add_argument("--mean", default="")
    p.add_argument("--std", default="")
    p.add_argument("--no-labels", action="store_true")
    p = sub.add_parser("loss")
    p.add_argument("dir")
    p.add_argument("images")
    p.add_argument("labels")
    p = sub.add_parser("topk")
    p.add_argument("dir")
    p.add_argument("files", nargs="+")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--mean", default="")
    p.add_argument("--std", default="")
    p = sub.add_parser("accuracy")
    p.add_argument("dir")
    p.add_argument("images")
    p.add_argument("labels")
    p.add_argument("--mean", default="")
    p.add_argument("--std", default="")
    a = ap.parse_args()
    {"make": make, "loss": loss, "topk": topk, "accuracy": accuracy}[a.cmd](a)


if __name__ == "__main__":
    main()
