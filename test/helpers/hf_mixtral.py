#!/usr/bin/python3
"""hf_mixtral.py — a Mixtral (mixture of experts) made in PyTorch here, in
Hugging Face's folder layout, and PyTorch's answers about it
(test/integration/init_from_mixtral.sh).

  hf_mixtral.py make DIR [--n-layer 2 --hidden 64 --heads 4 --kv-heads 2
                          --ffn 48 --experts 4 --top-k 2 --vocab 256
                          --positions 64 --seed 0 --extra K=JSON]
      random weights written as Hugging Face writes MixtralForCausalLM:
      config.json with MixtralConfig's keys (model_type mixtral,
      num_local_experts, num_experts_per_tok, intermediate_size = an expert's
      width, router_aux_loss_coef, sliding_window null), model.safetensors
      under transformers' names: the Llama's attention and norms, and per
      layer model.layers.N.block_sparse_moe.gate.weight [E, C] and
      model.layers.N.block_sparse_moe.experts.E.{w1,w2,w3}.weight.
  hf_mixtral.py loss DIR VAL.bin | loss-file DIR FILE --seq-len T |
               greedy DIR --prompt-ids 1,2,3 --n 32
      as hf_llama.py's (the language-model loss: no balance loss).

The MoE block is transformers' MixtralSparseMoeBlock written out: router
logits gate(x), softmax over the experts in fp32, the top k of them, their
weights divided by their sum, each expert w2(silu(w1(x)) * w3(x)), the
weighted sum. Every block is such a block; the rest is hf_llama.py's Llama.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_llama  # noqa: E402
from hf_gpt2 import read_weights, write_weights  # noqa: E402


class Expert(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.w1 = nn.Linear(d, f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)
        self.w3 = nn.Linear(d, f, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoe(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.E, self.k = c["hidden_size"], c["num_local_experts"], c["num_experts_per_tok"]
        self.gate = nn.Linear(d, self.E, bias=False)
        self.experts = nn.ModuleList([Expert(d, c["intermediate_size"]) for _ in range(self.E)])

    def forward(self, x):
        B, T, d = x.shape
        h = x.reshape(-1, d)
        w = F.softmax(self.gate(h), dim=1, dtype=torch.float)
        w, sel = torch.topk(w, self.k, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in range(self.E):
            rows, slot = torch.where(sel == e)
            if rows.numel():
                out.index_add_(0, rows, self.experts[e](h[rows]) * w[rows, slot, None])
        return out.reshape(B, T, d)


class Layer(hf_llama.Layer):
    def __init__(self, c):
        super().__init__(c)
        del self.mlp
        self.block_sparse_moe = SparseMoe(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.block_sparse_moe(self.post_attention_layernorm(x))


class Mixtral(hf_llama.Llama):
    def __init__(self, c):
        super().__init__(c)
        self.model.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])


def make(a):
    torch.manual_seed(a.seed)
    cfg = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": a.vocab,
           "hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.n_layer,
           "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "max_position_embeddings": a.positions,
           "rope_theta": 1e6, "rms_norm_eps": 1e-5, "hidden_act": "silu", "sliding_window": None,
           "num_local_experts": a.experts, "num_experts_per_tok": a.top_k, "router_aux_loss_coef": 0.02,
           "output_router_logits": False, "tie_word_embeddings": False, "attention_dropout": 0.0,
           "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    for kv in a.extra:
        k, v = kv.split("=", 1)
        cfg[k] = json.loads(v)
    m = Mixtral(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn_like(p))
            elif name.endswith("gate.weight"):  # a router that prefers some experts: loads differ
                p.copy_(2.0 * torch.randn_like(p) / p.shape[1] ** 0.5)
            else:
                p.copy_(0.7 * torch.randn_like(p) / p.shape[1] ** 0.5)
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_weights(a.dir, dict(m.state_dict()), 1)


def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    m = Mixtral(cfg)
    m.load_state_dict(read_weights(d), strict=True)
    m.eval()
    return m, cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("dir")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=48)
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--positions", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--extra", action="append", default=[])
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
    p.add_argument("--n", type=int, default=32)
    a = ap.parse_args()
    if a.cmd == "make":
        make(a)
        return
    hf_llama.load = load  # hf_llama's answers, about this model
    {"loss": hf_llama.loss, "loss-file": hf_llama.loss_file, "greedy": hf_llama.greedy}[a.cmd](a)


if __name__ == "__main__":
    main()
