/* export_lora.c — `dtrun export --lora merged|adapter CKPT DIR/` of a
 * train.lora checkpoint (ckpt.h ckpt_export_lora).
 *
 * A LoRA checkpoint holds the adapters (param/h.N.lora.TARGET.a, .b) and
 * their optimizer state; the frozen base is where the run took it from: its
 * job's model.init_from folder (recorded in the index), or without one the
 * seed's draw, which model_init_tensor makes again.
 *
 * merged: a Hugging Face folder (config.json + model.safetensors, the names
 * and layouts of hf_names.c) whose adapted weights are W + (alpha / r) B A:
 * a Llama's q, k, v, o, gate, up, down one for one, a GPT's q, k, v the
 * three row blocks of its qkv. The sum in fp32, then the --dtype.
 *
 * adapter: a PEFT folder, as LoraConfig and save_pretrained write it:
 * adapter_config.json and adapter_model.safetensors (lora_A [r, in], lora_B
 * [out, r] under base_model.model.<module>). Tensors are produced one at a
 * time while the file streams out. */
#include "runtime/ckpt/ckpt_internal.h"
#include "runtime/ckpt/ckpt_io.h"
#include "runtime/ckpt/hf_import.h"
#include "runtime/ckpt/hf_names.h"
#include "runtime/model/model.h"

#include "kernels/ops.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const ckpt *ck;
    const job_model *m;
    hf_weights *base;   /* model.init_from's folder, or NULL: the seed's draw */
    unsigned long long seed;
    param_spec p;       /* the tensor (global, offset 0), or an adapter's name in src */
    char src[CKPT_NAME_MAX]; /* adapter: the checkpoint's tensor */
    int transpose, bf16;
} lora_fill;

/* The checkpoint's adapter NAME of layer l's target t (a or b) into out. */
static int read_adapter(const lora_fill *f, int layer, int t, char which, float *out, char *err, size_t errlen)
{
    char name[CKPT_NAME_MAX];
    snprintf(name, sizeof name, "param/h.%d.lora.%s.%c", layer, job_lora_target_name(t), which);
    return ckpt_read_global(f->ck, name, out, err, errlen);
}

/* W[row0 .., :] += s B A for target t of layer l: B [rows, r], A [r, cols]. */
static int merge_target(const lora_fill *f, int layer, int t, float *W, int64_t row0, int64_t cols, char *err,
                        size_t errlen)
{
    int in, out, row, r = f->m->lora.rank;
    lora_geometry(f->m, t, &in, &out, &row);
    float *A = malloc((size_t)r * (size_t)in * sizeof(float)), *B = malloc((size_t)out * (size_t)r * sizeof(float));
    int rc = A && B ? 0 : st_fail(err, errlen, "%s: out of memory merging the adapters", ckpt_path(f->ck));
    if (rc == 0) rc = read_adapter(f, layer, t, 'a', A, err, errlen);
    if (rc == 0) rc = read_adapter(f, layer, t, 'b', B, err, errlen);
    float s = (float)(f->m->lora.alpha / r);
    for (int64_t i = 0; rc == 0 && i < out; i++)
        for (int64_t j = 0; j < cols; j++) {
            float acc = 0;
            for (int k = 0; k < r; k++) acc += B[i * r + k] * A[(int64_t)k * cols + j];
            W[(row0 + i) * cols + j] += s * acc;
        }
    free(A), free(B);
    return rc;
}

/* Which targets a base tensor takes, and where: its layer, and per target
 * the first row (GPT's qkv: q, k, v at 0, C, 2C). */
static int adapted(const job_model *m, const char *name, int *layer, int targets[3], int64_t rows0[3])
{
    int pos = 0, n = 0;
    if (sscanf(name, "h.%d.%n", layer, &pos) != 1 || pos == 0) return 0;
    const char *leaf = name + pos;
    static const char *const llama[LORA_N_TARGETS] = {"attn.q.w", "attn.k.w", "attn.v.w", "attn.o.w",
                                                      "mlp.gate.w", "mlp.up.w", "mlp.down.w"};
    static const char *const gpt[LORA_N_TARGETS] = {"attn.qkv.w", "attn.qkv.w", "attn.qkv.w", "attn.proj.w", "",
                                                    "mlp.fc.w", "mlp.proj.w"};
    for (int t = 0; t < LORA_N_TARGETS; t++) {
        if (!(m->lora.targets >> t & 1) || strcmp(leaf, (m->kind == MODEL_LLAMA ? llama : gpt)[t])) continue;
        targets[n] = t;
        rows0[n++] = m->kind == MODEL_GPT && t < 3 ? (int64_t)t * m->d_model : 0;
    }
    return n;
}

static int merged_fill(void *ctx, void *buf, size_t nbytes, char *err, size_t errlen)
{
    lora_fill *f = ctx;
    (void)nbytes;
    const param_spec *p = &f->p;
    size_t n = p->local_numel;
    int64_t rows = p->shape[0], cols = p->shape[1];
    float *W = malloc(n * sizeof(float)), *T = f->transpose ? malloc(n * sizeof(float)) : NULL;
    int rc = W && (T || !f->transpose) ? 0 : st_fail(err, errlen, "out of memory exporting '%s'", p->name);
    if (rc == 0 && f->base) rc = hf_weights_read_unit_slice(f->base, f->m, p, 1, 0, 1, 0, n, W, err, errlen);
    else if (rc == 0) model_init_tensor(p, 0, 1, f->seed, W);
    int layer, targets[3];
    int64_t rows0[3];
    for (int k = 0, nt = rc == 0 ? adapted(f->m, p->name, &layer, targets, rows0) : 0; rc == 0 && k < nt; k++)
        rc = merge_target(f, layer, targets[k], W, rows0[k], cols, err, errlen);
    const float *src = W;
    if (rc == 0 && f->transpose) { /* GPT-2's Conv1D: [in, out] */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) T[c * rows + r] = W[r * cols + c];
        src = T;
    }
    if (rc == 0 && f->bf16) dt_ops_cpu.to_bf16(buf, src, n);
    else if (rc == 0) memcpy(buf, src, n * sizeof(float));
    free(W), free(T);
    return rc;
}

static int adapter_fill(void *ctx, void *buf, size_t nbytes, char *err, size_t errlen)
{
    lora_fill *f = ctx;
    if (!f->bf16) return ckpt_read_global(f->ck, f->src, buf, err, errlen);
    size_t n = nbytes / 2;
    float *tmp = malloc((n ? n : 1) * sizeof(float));
    if (!tmp) return st_fail(err, errlen, "out of memory exporting '%s'", f->src);
    int rc = ckpt_read_global(f->ck, f->src, tmp, err, errlen);
    if (rc == 0) dt_ops_cpu.to_bf16(buf, tmp, n);
    free(tmp);
    return rc;
}

/* The merged model: every base tensor of the model, adapted ones with B A folded in. */
static int export_merged(const ckpt *ck, const job_model *m, const char *dir, int bf16, char *err, size_t errlen)
{
    const ckpt_info *info = ckpt_get_info(ck);
    hf_weights *base = NULL;
    if (m->init_from[0] && hf_weights_open(m->init_from, &base, err, errlen) != 0) return -1;
    int total = 0;
    for (int u = 0; u < model_n_units(m); u++) total += model_unit_param_count(m, u);
    lora_fill *ctx = calloc((size_t)total + 1, sizeof *ctx);
    st_writer *w = st_writer_new();
    int rc = ctx && w ? 0 : st_fail(err, errlen, "%s: out of memory", dir), k = 0;
    ckpt_naming naming = hf_naming_of(m);
    if (w) st_writer_set_metadata(w, "format", "pt");
    for (int u = 0; rc == 0 && u < model_n_units(m); u++)
        for (int i = 0; rc == 0 && i < model_unit_param_count(m, u); i++) {
            lora_fill *f = &ctx[k];
            *f = (lora_fill){.ck = ck, .m = m, .base = base, .seed = info->seed, .bf16 = bf16};
            model_unit_param_spec(m, u, i, 0, 1, &f->p);
            if (f->p.lora || f->p.tied) continue; /* the head's copy of a tied wte: wte's own */
            f->p.offset = 0;
            int64_t shape[2] = {f->p.shape[0], f->p.shape[1]};
            hf_tensor t[1]; /* LoRA models are dense: one file tensor each */
            if (hf_name_of(f->p.name, f->p.ndim, shape, naming, m, t, 1) != 1) {
                rc = st_fail(err, errlen, "%s: no %s name for '%s'", ckpt_path(ck), hf_naming_label(naming), f->p.name);
                break;
            }
            f->transpose = t[0].transpose;
            rc = st_writer_add_fill(w, t[0].name, bf16 ? ST_BF16 : ST_F32, t[0].ndim, t[0].shape, merged_fill, f, err,
                                    errlen);
            k++;
        }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (rc == 0) rc = ckpt_io_write_st_atomic(path, w, err, errlen);
    if (rc == 0) rc = ckpt_write_json(dir, "config.json", ckpt_hf_config_json(m), err, errlen);
    st_writer_free(w);
    free(ctx);
    hf_weights_close(base);
    return rc;
}

/* adapter_config.json: PEFT's LoraConfig of these adapters. */
static char *adapter_config_json(const job_model *m)
{
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddStringToObject(c, "peft_type", "LORA");
    cJSON_AddStringToObject(c, "task_type", "CAUSAL_LM");
    if (m->init_from[0]) cJSON_AddStringToObject(c, "base_model_name_or_path", m->init_from);
    else cJSON_AddNullToObject(c, "base_model_name_or_path");
    cJSON_AddNumberToObject(c, "r", m->lora.rank);
    cJSON_AddNumberToObject(c, "lora_alpha", m->lora.alpha);
    cJSON_AddNumberToObject(c, "lora_dropout", m->lora.dropout);
    cJSON *t = cJSON_AddArrayToObject(c, "target_modules");
    for (int i = 0; t && i < LORA_N_TARGETS; i++)
        if (m->lora.targets >> i & 1) cJSON_AddItemToArray(t, cJSON_CreateString(job_lora_module_name(m, i)));
    cJSON_AddStringToObject(c, "bias", "none");
    /* GPT-2's modules are Conv1D (PEFT's convention for them; the adapters' layout is the same) */
    cJSON_AddBoolToObject(c, "fan_in_fan_out", m->kind == MODEL_GPT);
    cJSON_AddBoolToObject(c, "inference_mode", 1);
    cJSON_AddBoolToObject(c, "init_lora_weights", 1);
    cJSON_AddBoolToObject(c, "use_rslora", 0);
    cJSON_AddBoolToObject(c, "use_dora", 0);
    cJSON_AddNullToObject(c, "modules_to_save");
    cJSON_AddObjectToObject(c, "rank_pattern");
    cJSON_AddObjectToObject(c, "alpha_pattern");
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

static int export_adapter(const ckpt *ck, const job_model *m, const char *dir, int bf16, char *err, size_t errlen)
{
    for (int i = 0; i < LORA_N_TARGETS; i++)
        if (m->lora.targets >> i & 1 && !job_lora_module_name(m, i))
            return st_fail(err, errlen, "%s: the gpt's %s adapter has no PEFT form (GPT-2's c_attn holds q, k and v as "
                                        "one module, which PEFT adapts with one A); export --lora merged instead",
                           ckpt_path(ck), job_lora_target_name(i));
    int n = ckpt_tensor_count(ck);
    lora_fill *ctx = calloc((size_t)n + 1, sizeof *ctx);
    st_writer *w = st_writer_new();
    int rc = ctx && w ? 0 : st_fail(err, errlen, "%s: out of memory", dir), k = 0;
    if (w) st_writer_set_metadata(w, "format", "pt");
    for (int i = 0; rc == 0 && i < n; i++) {
        const char *name = ckpt_tensor_name(ck, i);
        if (strncmp(name, "param/", 6) != 0) continue; /* the moments stay behind */
        int64_t shape[2];
        int ndim = ckpt_tensor_shape(ck, name, shape);
        hf_tensor t[1]; /* LoRA models are dense: one file tensor each */
        if (hf_name_of(name + 6, ndim, shape, hf_naming_of(m), m, t, 1) != 1 || !strstr(t[0].name, ".lora_")) {
            rc = st_fail(err, errlen, "%s: '%s' is not a LoRA adapter", ckpt_path(ck), name);
            break;
        }
        lora_fill *f = &ctx[k++];
        *f = (lora_fill){.ck = ck, .m = m, .bf16 = bf16};
        snprintf(f->src, sizeof f->src, "%s", name);
        rc = st_writer_add_fill(w, t[0].name, bf16 ? ST_BF16 : ST_F32, t[0].ndim, t[0].shape, adapter_fill, f, err,
                                errlen);
    }
    if (rc == 0 && k == 0) rc = st_fail(err, errlen, "%s: no adapters to export", ckpt_path(ck));
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (rc == 0) rc = ckpt_io_write_st_atomic(path, w, err, errlen);
    if (rc == 0) rc = ckpt_write_json(dir, "adapter_config.json", adapter_config_json(m), err, errlen);
    st_writer_free(w);
    free(ctx);
    return rc;
}

int ckpt_export_lora(const ckpt *ck, const char *dir, int adapter, int bf16, char *err, size_t errlen)
{
    const ckpt_info *info = ckpt_get_info(ck);
    if (!info->has_model || !job_lora_on(&info->model))
        return st_fail(err, errlen, "%s holds no train.lora adapters (a whole model: export it without --lora)",
                       ckpt_path(ck));
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return st_fail(err, errlen, "%s: cannot create (%s)", dir, strerror(errno));
    return adapter ? export_adapter(ck, &info->model, dir, bf16, err, errlen)
                   : export_merged(ck, &info->model, dir, bf16, err, errlen);
}
