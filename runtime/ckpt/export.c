/* export.c — one consolidated safetensors file under Hugging Face names, so a
 * dtrun run can be loaded by transformers (GPT2LMHeadModel) or timm
 * (VisionTransformer).
 *
 * The names and the layout differences are hf_names.c's table (shared with
 * model.init_from's import, hf_import.c):
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
#include "runtime/ckpt/hf_names.h"

#include "kernels/ops.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const ckpt *ck;
    char src[CKPT_NAME_MAX];
    int transpose;      /* of the global [rows, cols] */
    int64_t rows, cols; /* global shape as stored */
    int bf16;           /* write BF16 (rounded) rather than F32 */
} fill_ctx;

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
        if (hf_name_of(name + 6, ndim, shape, naming, info->has_model ? &info->model : NULL, &t) != 0) {
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

/* config.json of a GPT-2 folder: the keys transformers' GPT2Config and
 * model.init_from read (GPT-2's fixed choices spelled out: tanh GELU, eps
 * 1e-5, the tied head). */
static char *gpt2_config_json(const job_model *m)
{
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    if (arch) cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(c, "model_type", "gpt2");
    cJSON_AddNumberToObject(c, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(c, "n_positions", m->seq_len);
    cJSON_AddNumberToObject(c, "n_ctx", m->seq_len);
    cJSON_AddNumberToObject(c, "n_embd", m->d_model);
    cJSON_AddNumberToObject(c, "n_layer", m->n_layer);
    cJSON_AddNumberToObject(c, "n_head", m->n_head);
    if (m->d_ff == 4 * m->d_model) cJSON_AddNullToObject(c, "n_inner");
    else cJSON_AddNumberToObject(c, "n_inner", m->d_ff);
    cJSON_AddStringToObject(c, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

int ckpt_export_hf_dir(const ckpt *ck, const char *dir, int bf16, char *err, size_t errlen)
{
    const ckpt_info *info = ckpt_get_info(ck);
    if (!info->has_model || info->model.kind != MODEL_GPT)
        return st_fail(err, errlen, "%s: a Hugging Face folder is written for GPT checkpoints only (export a ViT to a "
                                    ".safetensors file)", ckpt_path(ck));
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return st_fail(err, errlen, "%s: cannot create (%s)", dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (ckpt_export_as(ck, path, CKPT_NAMES_HF_GPT2, bf16, err, errlen) != 0) return -1;
    char *json = gpt2_config_json(&info->model);
    if (!json) return st_fail(err, errlen, "%s: out of memory", dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t n = strlen(json);
    json = realloc(json, n + 2);
    json[n] = '\n';
    int rc = ckpt_io_write_bytes_atomic(path, json, n + 1, err, errlen);
    free(json);
    return rc;
}
