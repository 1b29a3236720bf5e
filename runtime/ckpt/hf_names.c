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
#define N_BLOCK (int)(sizeof block_ours / sizeof block_ours[0])

int hf_name_of(const char *ours, int ndim, const int64_t shape[2], ckpt_naming naming, const job_model *m,
               hf_tensor *out)
{
    memset(out, 0, sizeof *out);
    out->ndim = ndim;
    out->shape[0] = shape[0];
    out->shape[1] = shape[1];
    int layer = -1, pos = 0;
    if (sscanf(ours, "h.%d.%n", &layer, &pos) == 1 && pos > 0 && layer >= 0) {
        const char *rest = ours + pos;
        for (int i = 0; i < N_BLOCK; i++) {
            if (strcmp(rest, block_ours[i]) != 0) continue;
            if (naming == CKPT_NAMES_HF_GPT2) {
                snprintf(out->name, sizeof out->name, "transformer.h.%d.%s", layer, block_gpt2[i]);
                if (ndim == 2) { /* Conv1D: [in, out] */
                    out->transpose = 1;
                    out->shape[0] = shape[1];
                    out->shape[1] = shape[0];
                }
            } else {
                snprintf(out->name, sizeof out->name, "blocks.%d.%s", layer, block_timm[i]);
            }
            return 0;
        }
        return -1;
    }
    static const char *const gpt2[][2] = {{"wte", "transformer.wte.weight"},
                                          {"wpe", "transformer.wpe.weight"},
                                          {"lnf.w", "transformer.ln_f.weight"},
                                          {"lnf.b", "transformer.ln_f.bias"}};
    static const char *const timm[][2] = {{"patch.b", "patch_embed.proj.bias"},
                                          {"lnf.w", "norm.weight"}, {"lnf.b", "norm.bias"},
                                          {"head.w", "head.weight"}, {"head.b", "head.bias"}};
    if (naming == CKPT_NAMES_HF_GPT2) {
        for (size_t i = 0; i < sizeof gpt2 / sizeof gpt2[0]; i++) {
            if (strcmp(ours, gpt2[i][0]) == 0) {
                snprintf(out->name, sizeof out->name, "%s", gpt2[i][1]);
                return 0;
            }
        }
        return -1;
    }
    for (size_t i = 0; i < sizeof timm / sizeof timm[0]; i++) {
        if (strcmp(ours, timm[i][0]) == 0) {
            snprintf(out->name, sizeof out->name, "%s", timm[i][1]);
            return 0;
        }
    }
    if (strcmp(ours, "cls") == 0) {
        snprintf(out->name, sizeof out->name, "cls_token");
        out->ndim = 3;
        out->shape[0] = 1;
        out->shape[1] = 1;
        out->shape[2] = shape[0];
        return 0;
    }
    if (strcmp(ours, "pos") == 0) {
        snprintf(out->name, sizeof out->name, "pos_embed");
        out->ndim = 3;
        out->shape[0] = 1;
        out->shape[1] = shape[0];
        out->shape[2] = shape[1];
        return 0;
    }
    if (strcmp(ours, "patch.w") == 0) {
        if (!m) return -1;
        int ch = m->channels, P = m->patch_size;
        if (ch < 1 || P < 1 || (int64_t)ch * P * P != shape[1]) return -1;
        snprintf(out->name, sizeof out->name, "patch_embed.proj.weight");
        out->ndim = 4;
        out->shape[0] = shape[0];
        out->shape[1] = ch;
        out->shape[2] = P;
        out->shape[3] = P;
        return 0;
    }
    return -1;
}

