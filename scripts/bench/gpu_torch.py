"""PyTorch side of scripts/bench/gpu.sh: the same models as dtrun's, trained on one GPU.

GPT (gpt2-124m, gpt2-350m): torch_gpt.py's twin of dtrun's built-in GPT (token +
learned position embedding, pre-LN blocks with biased qkv and proj, causal
attention, 4C MLP with tanh-GELU, final LN, LM head tied to the token embedding,
vocab 50257 unpadded).
ViT (vit-b16): the twin of dtrun's ViT (runtime/model/vit.c), written here:
patch projection (a stride-P convolution = dtrun's patches @ w^T + b), class
token first, learned position embedding over NP + 1 positions, the same pre-LN
blocks without the causal mask, final LN on the class token, linear
classifier, cross-entropy. tanh-GELU and layernorm eps 1e-5, the preset's
defaults in dtrun. 224 x 224 images of 3 channels, patch 16, 1000 classes.
Both: AdamW (fused; betas 0.9, 0.95, weight decay 0.1), gradients clipped to
global norm 1.0 as dtrun's job and llm.c do.
Precision:
  bf16 -- autocast bf16 with fp32 master weights, F.scaled_dot_product_attention
          (flash attention), torch.compile: the peer the issue sets the goal against;
  fp32 -- plain fp32, TF32 off, same attention and torch.compile: the
          same-arithmetic peer for dtrun's fp32 path.
Prints one JSON line: median items/s (tokens or images) over the timed steps,
the model FLOPs per item by dtrun's formula (flops.py), and memory: the driver's
used bytes (total - free, sampled after every step, as gpu_train measures dtrun)
and torch's own peak allocation."""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Same folder (on sys.path when run as a script): one definition of each.
from flops import PRESETS, per_item  # noqa: E402
from torch_gpt import GPT  # noqa: E402


class ViTBlock(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class ViT(nn.Module):
    def __init__(self, L, C, H, image=224, patch=16, channels=3, classes=1000):
        super().__init__()
        n_patch = (image // patch) ** 2
        self.patch = nn.Conv2d(channels, C, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, C) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n_patch + 1, C) * 0.02)
        self.blocks = nn.ModuleList(ViTBlock(C, H) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.head = nn.Linear(C, classes)

    def forward(self, images, labels):
        x = self.patch(images).flatten(2).transpose(1, 2)  # [B, NP, C], row-major patches
        x = torch.cat([self.cls.expand(x.size(0), -1, -1), x], dim=1) + self.pos
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x[:, 0]))
        return F.cross_entropy(logits.float(), labels)


ALIASES = {"124m": "gpt2-124m", "350m": "gpt2-350m"}


def driver_used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(PRESETS) + sorted(ALIASES))
    ap.add_argument("--batch", type=int, default=0, help="default: 16 (124m), 8 (350m), 64 (ViT)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_torch.py: torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    name = ALIASES.get(a.model, a.model)
    kind, L, H, C = PRESETS[name]
    B = a.batch or {"gpt2-124m": 16, "gpt2-350m": 8}.get(name, 64)
    dev = "cuda"
    torch.manual_seed(0)
    g = torch.Generator(device=dev).manual_seed(7)
    if kind == "gpt":
        V, T = 50257, 1024
        model = GPT(L, C, H, V, T).to(dev)
        x = torch.randint(0, V, (B, T), device=dev, generator=g)
        y = torch.randint(0, V, (B, T), device=dev, generator=g)
        per_sample, unit = T, "tok"
    else:
        model = ViT(L, C, H).to(dev)
        x = torch.randn(B, 3, 224, 224, device=dev, generator=g)
        y = torch.randint(0, 1000, (B,), device=dev, generator=g)
        T, per_sample, unit = (224 // 16) ** 2 + 1, 1, "img"
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=True)
    step_model = model if a.no_compile else torch.compile(model)

    def step():
        opt.zero_grad(set_to_none=True)
        if a.precision == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(x, y)
        else:
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        return loss

    t_compile = time.perf_counter()
    for _ in range(a.warmup):
        loss = step()
    torch.cuda.synchronize()
    t_compile = time.perf_counter() - t_compile
    times, used = [], driver_used()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        used = max(used, driver_used())
    med = statistics.median(times)
    print(json.dumps({
        "impl": "pytorch" + ("" if a.no_compile else "+compile"), "model": name, "kind": kind,
        "B": B, "T": T, "precision": a.precision, "device": torch.cuda.get_device_name(),
        "torch": torch.__version__, "step_ms": round(med * 1e3, 3),
        "items_per_s": round(B * per_sample / med, 1), "unit": unit, "flops_per_item": per_item(name),
        "loss": round(loss.item(), 4), "warmup_s": round(t_compile, 1),
        "mem_measured_b": used, "mem_torch_peak_b": torch.cuda.max_memory_allocated()}))


if __name__ == "__main__":
    main()
