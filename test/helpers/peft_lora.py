#!/usr/bin/python3
"""peft_lora.py — PEFT's LoRA written in PyTorch here, on the Llama of
hf_llama.py, and its answers about dtrun's train.lora (test/integration/
lora_hf.sh). The peft package is not installed: this is its lora.Linear in a
page, and its folder format.

  peft_lora.py make-adapter BASE OUT --r 4 --alpha 8 --targets q_proj,v_proj [--seed 1]
      a PEFT adapter folder for the model in BASE (a Hugging Face Llama
      folder): adapter_config.json (LoraConfig's keys) and
      adapter_model.safetensors, lora_A and lora_B random (B nonzero, so the
      adapter changes the model), under PEFT's names
      base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight ...
  peft_lora.py loss BASE ADAPTER VAL.bin
      the mean cross-entropy per token over dtrun's validation dump
      (DTRUN_DUMP_VAL) of the base model with the adapter loaded into PEFT's
      LoRA (strictly: every adapter tensor used, every LoRA layer given its
      A and B, shapes as declared), to 9 decimals.
  peft_lora.py merged-check BASE ADAPTER MERGED
      MERGED (dtrun export --lora merged) holds, for every adapted module,
      W + lora_alpha / r * B @ A computed here from BASE and ADAPTER (dtrun
      export --lora adapter of the same checkpoint), within 1e-6 of the
      largest weight, and every other tensor of BASE bit for bit.
  peft_lora.py frozen-check BASE DUMP --r R --targets q,k,...
      DUMP (DTRUN_DUMP_PARAMS of a train.lora run of the model BASE: per unit
      its trainable tensors, the adapters, then its frozen ones, fp32) holds
      BASE's tensors bit for bit: the base did not move while it trained.

LoRA (Hu et al.; PEFT's lora.Linear): y = base(x) + lora_B(lora_A(dropout(x)))
* lora_alpha / r, lora_A [r, in] and lora_B [out, r] bias-free nn.Linear;
target_modules match a module whose name ends with ".<target>".
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from hf_gpt2 import read_safetensors, read_weights, val_loss, write_safetensors  # noqa: E402
from hf_llama import load  # noqa: E402

PREFIX = "base_model.model."


class LoraLinear(nn.Module):
    """PEFT's lora.Linear: the frozen base layer plus B A dropout(x) * alpha / r."""

    def __init__(self, base, r, alpha, dropout):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.scaling = alpha / r

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def inject(model, cfg):
    """Every nn.Linear whose name ends with a target module becomes a LoraLinear."""
    names = [n for n, mod in model.named_modules() if isinstance(mod, nn.Linear)
             and any(n == t or n.endswith("." + t) for t in cfg["target_modules"])]
    for n in names:
        parent, _, leaf = n.rpartition(".")
        holder = model.get_submodule(parent) if parent else model
        setattr(holder, leaf, LoraLinear(getattr(holder, leaf), cfg["r"], cfg["lora_alpha"], cfg["lora_dropout"]))
    return names


def load_adapter(model, d):
    cfg = json.load(open(os.path.join(d, "adapter_config.json")))
    assert cfg.get("peft_type") == "LORA", cfg.get("peft_type")
    adapted = inject(model, cfg)
    assert adapted, "target_modules match no module"
    sd = read_safetensors(os.path.join(d, "adapter_model.safetensors"))
    own = {n: p for n, p in model.named_parameters() if ".lora_" in n}
    used = set()
    with torch.no_grad():
        for k, v in sd.items():
            assert k.startswith(PREFIX), f"{k}: not under {PREFIX}"
            name = k[len(PREFIX):]
            assert name in own, f"{k}: no such LoRA parameter (have {sorted(own)[:4]}...)"
            assert tuple(own[name].shape) == tuple(v.shape), f"{k}: {tuple(v.shape)}, the layer's is {tuple(own[name].shape)}"
            own[name].copy_(v)
            used.add(name)
    missing = sorted(set(own) - used)
    assert not missing, f"no tensor for {missing[:4]}"
    model.eval()
    return cfg


def make_adapter(a):
    torch.manual_seed(a.seed)
    m, _ = load(a.base)
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": a.base, "r": a.r,
           "lora_alpha": a.alpha, "lora_dropout": 0.0, "target_modules": a.targets.split(","), "bias": "none",
           "fan_in_fan_out": False, "inference_mode": True, "use_rslora": False, "use_dora": False,
           "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {}}
    inject(m, cfg)
    sd = {}
    for n, p in m.named_parameters():
        if ".lora_" in n:
            sd[PREFIX + n] = 0.3 * torch.randn_like(p) / p.shape[1] ** 0.5
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(a.out, "adapter_model.safetensors"), sd)


def loss(a):
    m, cfg = load(a.base)
    load_adapter(m, a.adapter)
    print(f"{val_loss(m, cfg['vocab_size'], a.val):.9f}")


def merged_check(a):
    base = read_weights(a.base)
    merged = read_weights(a.merged)
    cfg = json.load(open(os.path.join(a.adapter, "adapter_config.json")))
    ad = read_safetensors(os.path.join(a.adapter, "adapter_model.safetensors"))
    s = cfg["lora_alpha"] / cfg["r"]
    want = dict(base)
    n_adapted = 0
    for k in ad:
        if not k.endswith(".lora_A.weight"):
            continue
        mod = k[len(PREFIX):-len(".lora_A.weight")]
        B = ad[PREFIX + mod + ".lora_B.weight"]
        want[mod + ".weight"] = base[mod + ".weight"] + s * (B.double() @ ad[k].double()).float()
        n_adapted += 1
    assert sorted(want) == sorted(merged), f"tensors differ: {sorted(set(want) ^ set(merged))[:4]}"
    worst, scale = 0.0, max(float(w.abs().max()) for w in want.values())
    for k, w in want.items():
        if k in base and torch.equal(w, base[k]):
            assert torch.equal(merged[k], w), f"{k}: not the base's bits"
            continue
        worst = max(worst, float((merged[k] - w).abs().max()))
    assert worst <= 1e-6 * scale, f"merged weights differ from base + s B A by {worst:.3g} (scale {scale:.3g})"
    print(f"{n_adapted} modules merged: max |merged - (W + {s:g} B A)| = {worst:.3g} "
          f"(<= 1e-6 x {scale:.3g}); the other {len(want) - n_adapted} tensors bit for bit")


def frozen_check(a):
    """The dump's layout (engine_dump.c): unit by unit, the trainable tensors
    (the adapters, A [r, in] then B [out, r] per target in the order q, k, v,
    o, gate, up, down), then the frozen ones in dtrun's order."""
    cfg = json.load(open(os.path.join(a.base, "config.json")))
    base = read_weights(a.base)
    d, f, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    kv = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * (d // cfg["num_attention_heads"])
    dims = {"q": (d, d), "k": (d, kv), "v": (d, kv), "o": (d, d), "gate": (d, f), "up": (d, f), "down": (f, d)}
    order = ["q", "k", "v", "o", "gate", "up", "down"]
    targets = [t for t in order if t in a.targets.split(",")]
    data = open(a.dump, "rb").read()
    vals = struct.unpack(f"<{len(data) // 4}f", data)
    at, checked = 0, 0

    def take(n):
        nonlocal at
        at += n
        return vals[at - n:at]

    def same(name):
        nonlocal checked
        t = base[name].reshape(-1).tolist()
        got = take(len(t))
        assert list(got) == [float(x) for x in struct.unpack(f"<{len(t)}f", struct.pack(f"<{len(t)}f", *t))], \
            f"{name}: the frozen weights moved"
        checked += len(t)

    same("model.embed_tokens.weight")
    for n in range(L):
        for t in targets:
            i, o = dims[t]
            take(a.r * i + o * a.r)
        p = f"model.layers.{n}."
        for leaf in ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                     "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            same(p + leaf + ".weight")
    same("model.norm.weight")
    if not cfg.get("tie_word_embeddings", False):
        same("lm_head.weight")
    assert at == len(vals), f"the dump holds {len(vals)} values, the layout {at}"
    print(f"the {checked} frozen values are the base's bit for bit")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make-adapter")
    p.add_argument("base")
    p.add_argument("out")
    p.add_argument("--r", type=int, default=4)
    p.add_argument("--alpha", type=float, default=8)
    p.add_argument("--targets", default="q_proj,v_proj")
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("loss")
    p.add_argument("base")
    p.add_argument("adapter")
    p.add_argument("val")
    p = sub.add_parser("merged-check")
    p.add_argument("base")
    p.add_argument("adapter")
    p.add_argument("merged")
    p = sub.add_parser("frozen-check")
    p.add_argument("base")
    p.add_argument("dump")
    p.add_argument("--r", type=int, required=True)
    p.add_argument("--targets", required=True)
    a = ap.parse_args()
    {"make-adapter": make_adapter, "loss": loss, "merged-check": merged_check, "frozen-check": frozen_check}[a.cmd](a)


if __name__ == "__main__":
    main()
