/* hf_names.h — dtrun's parameter names and shapes <-> Hugging Face GPT-2
 * (transformers' GPT2LMHeadModel), Hugging Face ViT (ViTForImageClassification)
 * and timm ViT names and shapes: the one table that `dtrun export` writes by
 * and `model.init_from` reads by, so the two cannot drift apart and an export
 * loads back bit for bit.
 *
 * GPT-2's attention and MLP weights are Conv1D, stored [in, out]: the
 * transposes of our Linear [out, in] (transpose = 1). The ViT patch projection
 * is a Conv2d [C, ch, P, P], the same bytes as our [C, ch*P*P]; the class token
 * and the position embedding carry leading batch dims. Hugging Face's ViT keeps
 * query, key and value as three Linear layers: our fused qkv [3C, C] (and its
 * bias [3C]) is the row-wise stack of the three (three parts, in that order;
 * tensor parallelism splits each part by heads, which is our split_groups 3).
 * The tied GPT LM head has no name of its own (save_pretrained omits it).
 *
 * Hugging Face's Llama (LlamaForCausalLM) names every dtrun tensor one to one,
 * in the same [out, in] layout: dtrun's q, k, v and gate, up are separate
 * tensors too (params.c packs them by adjacency), and its RoPE turns the same
 * channel pairs as transformers' rotate_half (i with i + head size / 2), so q
 * and k rows need no permutation either way. A tied Llama's head is wte.
 *
 * A Llama with model.moe is Hugging Face's Mixtral (MixtralForCausalLM):
 * its attention and norms are the Llama's names, its router is
 * block_sparse_moe.gate [E, C], and each expert e has w1 (gate), w3 (up) and
 * w2 (down), [Fe, C], [Fe, C], [C, Fe]. dtrun stacks the experts by rows
 * (params.c): its gate_up [E 2Fe, C] is 2E parts (w1 of expert 0, w3 of
 * expert 0, w1 of expert 1, ...), its down [E C, Fe] E parts (w2 of each).
 * Mixtral has no shared experts and no dense blocks: a model with them has
 * no Mixtral name for those tensors.
 *
 * train.lora's adapters ("h.N.lora.q.a", ".b") go by PEFT's names
 * (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight ...), the
 * same [r, in] and [out, r] layout; a GPT's by GPT-2's modules (o: attn.c_proj,
 * up: mlp.c_fc, down: mlp.c_proj), its q, k, v having none (PEFT adapts
 * c_attn whole, with one A). */
#ifndef DTRUN_HF_NAMES_H
#define DTRUN_HF_NAMES_H

#include <stdint.h>

#include "lib/job/jobspec.h"
#include "runtime/ckpt/ckpt.h"


typedef struct {
    char name[160];   /* "transformer.h.0.attn.c_attn.weight", "blocks.0.attn.qkv.weight", ... */
    int ndim;
    int64_t shape[4]; /* as stored in the Hugging Face file */
    int transpose;    /* 1: the file holds our [rows, cols] tensor as [cols, rows] */
} hf_tensor;

/* Our parameter name (without "param/"), its global shape (ndim 1 or 2;
 * shape[1] = 1 for 1-D), the naming (CKPT_NAMES_HF_GPT2, _HF_VIT, _TIMM_VIT,
 * _HF_LLAMA or _HF_MIXTRAL) and the model (needed for ViT's patch weight and
 * Mixtral's experts; may be NULL otherwise) -> the stored tensor(s): returns
 * how many there are (1; 3 for HF ViT's qkv; Mixtral's 2E or E for the
 * experts': our rows are out[0]'s, then out[1]'s, ..., rows / n each) and
 * writes the first min(that, cap) to out; -1 when the name has no
 * counterpart. */
int hf_name_of(const char *ours, int ndim, const int64_t shape[2], ckpt_naming naming, const job_model *m,
               hf_tensor *out, int cap);
/* The naming of a model's Hugging Face folder: GPT-2's, HF ViT's, Llama's,
 * or Mixtral's (a Llama with model.moe); and its label for messages
 * ("GPT-2", "Hugging Face ViT", ...). */
ckpt_naming hf_naming_of(const job_model *m);
const char *hf_naming_label(ckpt_naming naming);

#endif
