#!/usr/bin/python3
"""hf_llama.py — a Llama made in PyTorch here, in Hugging Face's folder layout,
and PyTorch's answers about it (test/integration/init_from_llama.sh).

  hf_llama.py make DIR [--n-layer 2 --hidden 64 --heads 4 --kv-heads 2
                        --ffn 96 --vocab 256 --positions 64 --theta 10000
                        --eps 1e-5 --tied --seed 0 --shards 1 --extra K=JSON]
      random weights (the RMSNorm gains random too, so a wrong name cannot
      hide), written as Hugging Face writes LlamaForCausalLM: config.json with
      LlamaConfig's keys, model.safetensors (or --shards N files and
      model.safetensors.index.json) under transformers' names
      (model.embed_tokens.weight, model.layers.N.self_attn.{q,k,v,o}_proj.weight,
      model.layers.N.mlp.{gate,up,down}_proj.weight,
      model.layers.N.{input,post_attention}_layernorm.weight, model.norm.weight,
      lm_head.weight unless --tied). --extra adds or overrides a config key
      (a JSON value: rope_scaling, attention_bias ... for the refusals).
  hf_llama.py loss DIR VAL.bin
      the mean cross-entropy per token over dtrun's validation dump
      (DTRUN_DUMP_VAL), to 9 decimals.
  hf_llama.py loss-file DIR FILE --seq-len T [--batch 8]
      the mean loss over a byte-level FILE's windows as `dtrun eval` takes
      them (hf_gpt2.py's).
  hf_llama.py greedy DIR --prompt-ids 1,2,3 --n 32
      greedy decoding (argmax), the new ids comma-separated, recomputing the
      whole prefix each token (no cache); on stderr the smallest margin
      between the best and second-best logit.

The model is transformers' LlamaForCausalLM written out in a page (it is not
installed here): pre-norm blocks, RMSNorm x / sqrt(mean(x^2) + eps) * w,
rotary embeddings in the rotate-half layout (channel i of a head pairs with
i + head_dim / 2; inv_freq = theta^(-2i / head_dim)), grouped-query
attention (each kv head repeated for its n_heads / n_kv_heads query heads, as
repeat_kv does), a SwiGLU MLP down(silu(gate(x)) * up(x)), no biases, an
untied (or tied) LM head; fp32. Runs under Debian's python3-torch.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from hf_gpt2 import read_weights, val_loss, windows_loss, write_weights  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.nh, self.nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = d // self.nh
        self.q_proj = nn.Linear(d, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv  # repeat_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / self.hd ** 0.5
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, f = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Inner(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, idx):
        T, hd = idx.shape[1], self.c["hidden_size"] // self.c["num_attention_heads"]
        inv_freq = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))


def make(a):
    torch.manual_seed(a.seed)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": a.vocab,
           "hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.n_layer,
           "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "max_position_embeddings": a.positions,
           "rope_theta": a.theta, "rope_scaling": None, "rms_norm_eps": a.eps, "hidden_act": "silu",
           "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": a.tied,
           "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    for kv in a.extra:
        k, v = kv.split("=", 1)
        cfg[k] = json.loads(v)
    m = Llama(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:  # small when tied: a large tied head only repeats the last token
                p.copy_((0.05 if a.tied else 0.5) * torch.randn_like(p))
            else:
                p.copy_(0.7 * torch.randn_like(p) / p.shape[1] ** 0.5)
    sd = dict(m.state_dict())
    if a.tied:
        del sd["lm_head.weight"]  # save_pretrained omits the tied head
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_weights(a.dir, sd, a.shards)


def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    m = Llama(cfg)
    sd = read_weights(d)
    if cfg.get("tie_word_embeddings", False):
        sd.setdefault("lm_head.weight", sd["model.embed_tokens.weight"])
    m.load_state_dict(sd, strict=True)
    m.eval()
    return m, cfg


def loss(a):
    m, cfg = load(a.dir)
    print(f"{val_loss(m, cfg['vocab_size'], a.val):.9f}")


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
    print(f"smallest top-1 - top-2 logit margin {margin:.3g}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("dir")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=96)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--positions", type=int, default=64)
    p.add_argument("--theta", type=float, default=10000.0)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", type=int, default=1)
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
    {"make": make, "loss": loss, "loss-file": loss_file, "greedy": greedy}[a.cmd](a)


if __name__ == "__main__":
    main()
