/* export.c — one consolidated safetensors file under Hugging Face names, so a
 * dtrun run can be loaded by transformers (GPT2LMHeadModel) or timm
 * (VisionTransformer).
 *
 * Layout differences handled here:
 *  - GPT-2's attention and MLP weights are Conv1D, stored [in, out]: our Linear
 *    [out, in] weights are transposed;
 *  - the LM head is tied to wte: omitted, as save_pretrained does (transformers
 *    re-ties it on load);
 *  - timm's patch projection is a Conv2d [C, ch, P, P]: our [C, ch*P*P] is the
 *    same bytes (flattened (c, py, px)), only the shape changes; cls_token and
 *    pos_embed get their leading batch dims [1, 1, C] and [1, NP+1, C].
 * Tensors are produced one at a time while the file streams out, so exporting
 * needs memory for the largest tensor (twice, when transposed), not the model.
 * The checkpoint's parameters are fp32 (a bf16 run saves its fp32 master);
 * exported as BF16 they are rounded to nearest even, the kernels' to_bf16, so
 * they are the bf16 parameters such a run computes with. */
#include "runtime/ckpt/ckpt_internal.h"
#include "runtime/ckpt/ckpt_io.h"

#include "kernels/ops.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const ckpt *ck;
    char src[CKPT_NAME_MAX];
    int transpose;      /* of the global [rows, cols] */
    int64_t rows, cols; /* global shape as stored */
    int bf16;           /* write BF16 (rounded) rather than F32 */
} fill_ctx;

typedef struct {
    char name[160];
    int ndim;
    int64_t shape[4];
    int transpose;
} hf_tensor;


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

/* Our parameter name (without "param/") and global shape -> the exported
 * tensor. Returns 0, or -1 when the name has no counterpart. */
static int map_name(const char *ours, int ndim, const int64_t *shape, ckpt_naming naming,
                    const ckpt_info *info, hf_tensor *out)
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
        int ch = info->model.channels, P = info->model.patch_size;
        if (!info->has_model || ch < 1 || P < 1 || (int64_t)ch * P * P != shape[1]) return -1;
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

static int fill(void *ctx, void *buf, size_t nbytes, char *err, size_t errlen)
{
    fill_ctx *f = ctx;
    if (!f->transpose && !f->bf16) return ckpt_read_global(f->ck, f->src, buf, err, errlen);
    size_t n = (size_t)f->rows * (size_t)f->cols;
    (void)nbytes; /* n elements of 4 or 2 bytes */
    float *tmp = malloc(n * sizeof(float)), *t2 = f->transpose && f->bf16 ? malloc(n * sizeof(float)) : NULL;
    if (!tmp || (f->transpose && f->bf16 && !t2)) {
        free(tmp);
        return st_fail(err, errlen, "%s: out of memory exporting '%s'", ckpt_path(f->ck), f->src);
    }
    int rc = ckpt_read_global(f->ck, f->src, tmp, err, errlen);
    const float *src = tmp;
    if (rc == 0 && f->transpose) {
        float *dst = f->bf16 ? t2 : buf;
        for (int64_t r = 0; r < f->rows; r++)
            for (int64_t c = 0; c < f->cols; c++) dst[c * f->rows + r] = tmp[r * f->cols + c];
        src = dst;
    }
    if (rc == 0 && f->bf16) dt_ops_cpu.to_bf16(buf, src, n);
    free(t2);
    free(tmp);
    return rc;
}

int ckpt_export(const ckpt *ck, const char *out_path, ckpt_naming naming, char *err, size_t errlen)
{
    return ckpt_export_as(ck, out_path, naming, 0, err, errlen);
}

int ckpt_export_as(const ckpt *ck, const char *out_path, ckpt_naming naming, int bf16, char *err, size_t errlen)
{
    const ckpt_info *info = ckpt_get_info(ck);
    if (naming == CKPT_NAMES_AUTO) {
        if (!info->has_model)
            return st_fail(err, errlen, "%s/index.json: no model section (cannot tell GPT from ViT; name the format)",
                        ckpt_path(ck));
        naming = info->model.kind == MODEL_VIT ? CKPT_NAMES_TIMM_VIT : CKPT_NAMES_HF_GPT2;
    }
    const char *fmt_name = naming == CKPT_NAMES_HF_GPT2 ? "GPT-2" : "timm ViT";
    int n = ckpt_tensor_count(ck);
    fill_ctx *ctx = calloc((size_t)n + 1, sizeof *ctx);
    st_writer *w = st_writer_new();
    int rc = -1, exported = 0;
    if (!ctx || !w) {
        st_fail(err, errlen, "%s: out of memory", out_path);
        goto out;
    }
    st_writer_set_metadata(w, "format", "pt"); /* transformers refuses files without it */
    for (int i = 0; i < n; i++) {
        const char *name = ckpt_tensor_name(ck, i);
        if (strncmp(name, "param/", 6) != 0) continue; /* optimizer state stays behind */
        int64_t shape[2];
        int ndim = ckpt_tensor_shape(ck, name, shape);
        hf_tensor t;
        if (map_name(name + 6, ndim, shape, naming, info, &t) != 0) {
            st_fail(err, errlen, "%s: no %s name for '%s' (shape [%lld, %lld])", ckpt_path(ck), fmt_name, name,
                 (long long)shape[0], (long long)shape[1]);
            goto out;
        }
        fill_ctx *f = &ctx[exported++];
        f->ck = ck;
        snprintf(f->src, sizeof f->src, "%s", name);
        f->transpose = t.transpose;
        f->rows = shape[0];
        f->cols = ndim == 2 ? shape[1] : 1;
        f->bf16 = bf16;
        if (st_writer_add_fill(w, t.name, bf16 ? ST_BF16 : ST_F32, t.ndim, t.shape, fill, f, err, errlen) != 0)
            goto out;
    }
    if (exported == 0) {
        st_fail(err, errlen, "%s: no parameters to export", ckpt_path(ck));
        goto out;
    }
    rc = ckpt_io_write_st_atomic(out_path, w, err, errlen);
out:
    st_writer_free(w);
    free(ctx);
    return rc;
}
