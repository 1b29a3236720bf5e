"""PyTorch side of scripts/bench/gpu.sh: the same GPT as dtrun's, trained on one GPU.

Same model as dtrun's built-in GPT (runtime/model): token + learned position
embedding, pre-LN blocks (qkv and proj with bias, causal attention, 4C MLP with
tanh-GELU), final LN, LM head tied to the token embedding, vocab 50257 (not
padded), AdamW (fused). Precision:
  bf16 -- autocast bf16 with fp32 master weights, F.scaled_dot_product_attention
          (flash attention), torch.compile: the peer the issue sets the goal against;
  fp32 -- plain fp32, TF32 off, same attention and torch.compile: the
          same-arithmetic peer for dtrun's current fp32-only CUDA backend.
Prints one JSON line: median tokens/s over the timed steps, and the model FLOPs
per token by the same formula as dtrun (runtime/model/params.c):
  6 * (12 L C^2 + V C) + 12 L T C   (per token, forward + backward)."""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# The model is torch_gpt.py's (the CPU benchmark's twin of dtrun's GPT): one definition.
from torch_gpt import GPT  # noqa: E402  (same folder: on sys.path when run as a script)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="124m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_torch.py: torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    L, C, H = PRESETS[a.model]
    V, T, B = 50257, a.seq, a.batch
    dev = "cuda"
    torch.manual_seed(0)
    model = GPT(L, C, H, V, T).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=True)
    step_model = model if a.no_compile else torch.compile(model)
    g = torch.Generator(device=dev).manual_seed(7)
    idx = torch.randint(0, V, (B, T), device=dev, generator=g)
    tgt = torch.randint(0, V, (B, T), device=dev, generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        if a.precision == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(idx, tgt)
        else:
            loss = step_model(idx, tgt)
        loss.backward()
        opt.step()
        return loss

    t_compile = time.perf_counter()
    for _ in range(a.warmup):
        loss = step()
    torch.cuda.synchronize()
    t_compile = time.perf_counter() - t_compile
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    flops_tok = 6 * (12 * L * C * C + V * C) + 12 * L * T * C
    print(json.dumps({
        "impl": "pytorch" + ("" if a.no_compile else "+compile"), "model": "gpt2-" + a.model,
        "B": B, "T": T, "precision": a.precision, "device": torch.cuda.get_device_name(),
        "torch": torch.__version__, "step_ms": round(med * 1e3, 3),
        "tokens_per_s": round(B * T / med, 1), "flops_per_token": flops_tok,
        "loss": round(loss.item(), 4), "warmup_s": round(t_compile, 1),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}))


if __name__ == "__main__":
    main()
