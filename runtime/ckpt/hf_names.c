/* hf_names.c — the name and shape table of hf_names.h. */
#include "runtime/ckpt/hf_names.h"

#include <stdio.h>
#include <string.h>

static const char *const block_ours[] = {"ln1.w", "ln1.b", "attn.qkv.w", "attn.qkv.b",
                                         "attn.proj.w", "attn.proj.b", "ln2.w", "ln2.b",
                                         "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b"};
static const char *const block_gpt2[] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
    "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
    "mlp.c_proj.weight", "mlp.c_proj.bias"};
static const char *const block_timm[] = {
    "norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
    "attn.proj.bias", "norm2.weight", "norm2.bias", "mlp.fc1.weight", "mlp.fc1.bias",
    "mlp.fc2.weight", "mlp.fc2.bias"};
/* Hugging Face ViT, under vit.encoder.layer.N.; qkv is the three "%s" parts */
static const char *const block_hf_vit[] = {
    "layernorm_before.weight", "layernorm_before.bias", "attention.attention.%s.weight",
    "attention.attention.%s.bias", "attention.output.dense.weight", "attention.output.dense.bias",
    "layernorm_after.weight", "layernorm_after.bias", "intermediate.dense.weight", "intermediate.dense.bias",
    "output.dense.weight", "output.dense.bias"};
#define N_BLOCK (int)(sizeof block_ours / sizeof block_ours[0])
static int named(hf_tensor *t, const char *name)
{
    snprintf(t->name, sizeof t->name, "%s", name);
    return 1;
}

/* Llama: dtrun's block tensors and LlamaForCausalLM's, under model.layers.N. */
static const char *const llama_ours[] = {"attn_norm.w", "attn.q.w", "attn.k.w", "attn.v.w", "attn.o.w",
                                         "mlp_norm.w", "mlp.gate.w", "mlp.up.w", "mlp.down.w"};
static const char *const llama_hf[] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight"};
#define N_LLAMA (int)(sizeof llama_ours / sizeof llama_ours[0])

ckpt_naming hf_naming_of(const job_model *m)
{
    if (m->kind == MODEL_LLAMA) return m->moe.experts > 0 ? CKPT_NAMES_HF_MIXTRAL : CKPT_NAMES_HF_LLAMA;
    return m->kind == MODEL_VIT ? CKPT_NAMES_HF_VIT : CKPT_NAMES_HF_GPT2;
}

const char *hf_naming_label(ckpt_naming n)
{
    return n == CKPT_NAMES_HF_GPT2      ? "GPT-2"
           : n == CKPT_NAMES_HF_VIT     ? "Hugging Face ViT"
           : n == CKPT_NAMES_HF_LLAMA   ? "Hugging Face Llama"
           : n == CKPT_NAMES_HF_MIXTRAL ? "Hugging Face Mixtral"
                                        : "timm ViT";
}

/* Mixtral's MoE tensors of layer `layer` (after "h.N."): the router one to
 * one, the experts' stacks as their experts' tensors. */
static int mixtral_moe_name(int layer, const char *leaf, const int64_t shape[2], const job_model *m, hf_tensor *out,
                            int cap)
{
    if (!strcmp(leaf, "moe.router.w")) {
        snprintf(out->name, sizeof out->name, "model.layers.%d.block_sparse_moe.gate.weight", layer);
        return 1;
    }
    int gate_up = !strcmp(leaf, "moe.experts.gate_up.w"), down = !strcmp(leaf, "moe.experts.down.w");
    int E = m ? m->moe.experts : 0;
    if ((!gate_up && !down) || E < 1) return -1;
    int n = gate_up ? 2 * E : E;
    if (shape[0] % n) return -1;
    hf_tensor first = *out;
    for (int k = 0; k < n && k < cap; k++) {
        out[k] = first;
        snprintf(out[k].name, sizeof out[k].name, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", layer,
                 gate_up ? k / 2 : k, down ? "w2" : k % 2 ? "w3" : "w1");
        out[k].shape[0] = shape[0] / n;
    }
    return n;
}

/* Llama: one to one, the same layout; Mixtral's experts as above. */
static int llama_name(const char *ours, const int64_t shape[2], ckpt_naming naming, const job_model *m,
                      hf_tensor *out, int cap)
{
    int layer = -1, pos = 0;
    if (sscanf(ours, "h.%d.%n", &layer, &pos) == 1 && pos > 0 && layer >= 0) {
        for (int i = 0; i < N_LLAMA; i++)
            if (!strcmp(ours + pos, llama_ours[i])) {
                /* Mixtral's blocks are all MoE: a dense MLP has no name there */
                if (naming == CKPT_NAMES_HF_MIXTRAL && !strncmp(llama_ours[i], "mlp.", 4)) return -1;
                snprintf(out->name, sizeof out->name, "model.layers.%d.%s", layer, llama_hf[i]);
                return 1;
            }
        return naming == CKPT_NAMES_HF_MIXTRAL ? mixtral_moe_name(layer, ours + pos, shape, m, out, cap) : -1;
    }
    static const char *const top[][2] = {{"wte", "model.embed_tokens.weight"},
                                         {"norm.w", "model.norm.weight"},
                                         {"lm_head.w", "lm_head.weight"}};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(ours, top[i][0])) return named(out, top[i][1]);
    return -1;
}

/* One block tensor, layer `layer`, table row i (out holds cap >= 3). */
static int block_name(int layer, int i, ckpt_naming naming, const int64_t shape[2], hf_tensor *out)
{
    if (naming == CKPT_NAMES_HF_GPT2) {
        snprintf(out->name, sizeof out->name, "transformer.h.%d.%s", layer, block_gpt2[i]);
        if (out->ndim == 2) { /* Conv1D: [in, out] */
            out->transpose = 1;
            out->shape[0] = shape[1];
            out->shape[1] = shape[0];
        }
        return 1;
    }
    if (naming == CKPT_NAMES_TIMM_VIT) {
        snprintf(out->name, sizeof out->name, "blocks.%d.%s", layer, block_timm[i]);
        return 1;
    }
    if (!strstr(block_hf_vit[i], "%s")) {
        snprintf(out->name, sizeof out->name, "vit.encoder.layer.%d.%s", layer, block_hf_vit[i]);
        return 1;
    }
    static const char *const qkv[3] = {"query", "key", "value"};
    if (shape[0] % 3) return -1;
    for (int k = 0; k < 3; k++) {
        char leaf[96];
        snprintf(leaf, sizeof leaf, block_hf_vit[i], qkv[k]);
        out[k] = out[0];
        snprintf(out[k].name, sizeof out[k].name, "vit.encoder.layer.%d.%s", layer, leaf);
        out[k].shape[0] = shape[0] / 3;
    }
    return 3;
}

/* ViT's embedding tensors, which carry leading batch dims or a conv shape in
 * both timm's and Hugging Face's files. */
static int vit_embedding(const char *ours, const int64_t shape[2], int hf, const job_model *m, hf_tensor *out)
{
    if (!strcmp(ours, "cls")) {
        named(out, hf ? "vit.embeddings.cls_token" : "cls_token");
        out->ndim = 3;
        out->shape[0] = out->shape[1] = 1;
        out->shape[2] = shape[0];
        return 1;
    }
    if (!strcmp(ours, "pos")) {
        named(out, hf ? "vit.embeddings.position_embeddings" : "pos_embed");
        out->ndim = 3;
        out->shape[0] = 1;
        out->shape[1] = shape[0];
        out->shape[2] = shape[1];
        return 1;
    }
    if (!strcmp(ours, "patch.w")) {
        if (!m) return -1;
        int ch = m->channels, P = m->patch_size;
        if (ch < 1 || P < 1 || (int64_t)ch * P * P != shape[1]) return -1;
        named(out, hf ? "vit.embeddings.patch_embeddings.projection.weight" : "patch_embed.proj.weight");
        out->ndim = 4;
        out->shape[0] = shape[0];
        out->shape[1] = ch;
        out->shape[2] = P;
        out->shape[3] = P;
        return 1;
    }
    return -1;
}

/* train.lora's adapters "h.N.lora.TARGET.a|b" under PEFT's names: the base
 * module's name under base_model.model., then lora_A / lora_B (nn.Linear:
 * [r, in] and [out, r], our layout, for GPT-2's Conv1D modules as well).
 * GPT-2's q, k and v are one c_attn module, which PEFT adapts with one A:
 * dtrun's three have no name there. */
static int lora_name(const char *ours, ckpt_naming naming, hf_tensor *out)
{
    int layer = -1, pos = 0;
    char target[8] = "", which = 0;
    if (sscanf(ours, "h.%d.lora.%7[a-z].%c%n", &layer, target, &which, &pos) != 3 || ours[pos] || layer < 0 ||
        (which != 'a' && which != 'b'))
        return 0;
    static const char *const llama[][2] = {{"q", "self_attn.q_proj"}, {"k", "self_attn.k_proj"},
                                           {"v", "self_attn.v_proj"}, {"o", "self_attn.o_proj"},
                                           {"gate", "mlp.gate_proj"}, {"up", "mlp.up_proj"},
                                           {"down", "mlp.down_proj"}};
    static const char *const gpt2[][2] = {{"o", "attn.c_proj"}, {"up", "mlp.c_fc"}, {"down", "mlp.c_proj"}};
    int is_llama = naming == CKPT_NAMES_HF_LLAMA || naming == CKPT_NAMES_HF_MIXTRAL;
    size_t n = is_llama ? sizeof llama / sizeof llama[0] : sizeof gpt2 / sizeof gpt2[0];
    for (size_t i = 0; i < n; i++) {
        const char *const *row = is_llama ? llama[i] : gpt2[i];
        if (strcmp(target, row[0])) continue;
        snprintf(out->name, sizeof out->name, "base_model.model.%s.%d.%s.lora_%c.weight",
                 is_llama ? "model.layers" : "transformer.h", layer, row[1], which == 'a' ? 'A' : 'B');
        return 1;
    }
    return -1;
}

static int edge_name(const char *ours, const int64_t shape[2], ckpt_naming naming, const job_model *m, hf_tensor *out);

int hf_name_of(const char *ours, int ndim, const int64_t shape[2], ckpt_naming naming, const job_model *m,
               hf_tensor *out, int cap)
{
    hf_tensor first, three[3];
    memset(&first, 0, sizeof first);
    first.ndim = ndim;
    first.shape[0] = shape[0];
    first.shape[1] = shape[1];
    int lora = lora_name(ours, naming, &first);
    if (lora) {
        if (lora > 0 && cap > 0) out[0] = first;
        return lora;
    }
    if (naming == CKPT_NAMES_HF_LLAMA || naming == CKPT_NAMES_HF_MIXTRAL) {
        hf_tensor *o = cap > 0 ? out : three; /* a count only: the first part still needs a place */
        *o = first;
        return llama_name(ours, shape, naming, m, o, cap > 0 ? cap : 1);
    }
    /* the other namings have at most 3 parts: made in place, then copied */
    three[0] = first;
    int n = -1, layer = -1, pos = 0;
    if (sscanf(ours, "h.%d.%n", &layer, &pos) == 1 && pos > 0 && layer >= 0) {
        for (int i = 0; i < N_BLOCK && n < 0; i++)
            if (!strcmp(ours + pos, block_ours[i])) n = block_name(layer, i, naming, shape, three);
    } else {
        n = edge_name(ours, shape, naming, m, three);
    }
    for (int k = 0; k < n && k < cap; k++) out[k] = three[k];
    return n;
}

/* The tensors outside the blocks (GPT-2's and the ViTs'). */
static int edge_name(const char *ours, const int64_t shape[2], ckpt_naming naming, const job_model *m, hf_tensor *out)
{
    static const char *const gpt2[][2] = {{"wte", "transformer.wte.weight"},
                                          {"wpe", "transformer.wpe.weight"},
                                          {"lnf.w", "transformer.ln_f.weight"},
                                          {"lnf.b", "transformer.ln_f.bias"}};
    static const char *const timm[][2] = {{"patch.b", "patch_embed.proj.bias"},
                                          {"lnf.w", "norm.weight"}, {"lnf.b", "norm.bias"},
                                          {"head.w", "head.weight"}, {"head.b", "head.bias"}};
    static const char *const hf_vit[][2] = {{"patch.b", "vit.embeddings.patch_embeddings.projection.bias"},
                                            {"lnf.w", "vit.layernorm.weight"}, {"lnf.b", "vit.layernorm.bias"},
                                            {"head.w", "classifier.weight"}, {"head.b", "classifier.bias"}};
    const char *const(*table)[2] = naming == CKPT_NAMES_HF_GPT2 ? gpt2 : naming == CKPT_NAMES_HF_VIT ? hf_vit : timm;
    size_t n = naming == CKPT_NAMES_HF_GPT2 ? sizeof gpt2 / sizeof gpt2[0]
               : naming == CKPT_NAMES_HF_VIT ? sizeof hf_vit / sizeof hf_vit[0]
                                              : sizeof timm / sizeof timm[0];
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ours, table[i][0])) return named(out, table[i][1]);
    if (naming == CKPT_NAMES_HF_GPT2) return -1;
    return vit_embedding(ours, shape, naming == CKPT_NAMES_HF_VIT, m, out);
}
