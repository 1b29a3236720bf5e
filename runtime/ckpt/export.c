/* export.c — one consolidated safetensors file under Hugging Face names, so a
 * dtrun run can be loaded by transformers (GPT2LMHeadModel,
 * ViTForImageClassification, LlamaForCausalLM) or timm (VisionTransformer);
 * a Hugging Face folder (config.json beside it), in shard files with their
 * index when the parameters exceed a shard's size.
 *
 * The names and the layout differences are hf_names.c's table (shared with
 * model.init_from's import, hf_import.c):
 *  - GPT-2's attention and MLP weights are Conv1D, stored [in, out]: our Linear
 *    [out, in] weights are transposed;
 *  - the LM head is tied to wte: omitted, as save_pretrained does (transformers
 *    re-ties it on load);
 *  - the ViT patch projection is a Conv2d [C, ch, P, P]: our [C, ch*P*P] is the
 *    same bytes (flattened (c, py, px)), only the shape changes; the class
 *    token and the position embedding get their leading batch dims [1, 1, C]
 *    and [1, NP+1, C];
 *  - Hugging Face's ViT has query, key and value apart: our qkv's three row
 *    blocks are written as three tensors;
 *  - a Llama's tensors are Hugging Face's one for one (its head written
 *    unless tied to wte).
 * Tensors are produced one at a time while the file streams out, so exporting
 * needs memory for the largest tensor (twice, when transposed), not the model.
 * The checkpoint's parameters are fp32 (a bf16 run saves its fp32 master);
 * exported as BF16 they are rounded to nearest even, the kernels' to_bf16, so
 * they are the bf16 parameters such a run computes with. */
#include "runtime/ckpt/ckpt_internal.h"
#include "runtime/ckpt/ckpt_io.h"
#include "runtime/ckpt/hf_names.h"
#include "runtime/data/data.h"

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
    int64_t rows, cols; /* our global shape */
    int part, n_parts;  /* this file tensor is row block `part` of n_parts of ours */
    int bf16;           /* write BF16 (rounded) rather than F32 */
} fill_ctx;

/* Part `part` of n_parts of a tensor's rows (not transposed): its elements
 * alone, read as a slice of the whole (Mixtral's experts: one expert's rows
 * of a stack of them). */
static int read_part(const fill_ctx *f, float *out, char *err, size_t errlen)
{
    size_t pn = (size_t)f->rows * (size_t)f->cols / (size_t)f->n_parts;
    ckpt_place want = {.ndim = f->cols > 1 ? 2 : 1, .shape = {f->rows, f->cols}, .split = CKPT_SPLIT_NONE,
                       .groups = 1, .tp_rank = 0, .tp_size = 1, .lo = (uint64_t)f->part * pn,
                       .hi = (uint64_t)(f->part + 1) * pn};
    int64_t shape[2];
    want.ndim = ckpt_tensor_shape(f->ck, f->src, shape);
    return ckpt_read_slice(f->ck, f->src, &want, out, err, errlen);
}

static int fill(void *ctx, void *buf, size_t nbytes, char *err, size_t errlen)
{
    fill_ctx *f = ctx;
    if (!f->transpose && !f->bf16 && f->n_parts == 1) return ckpt_read_global(f->ck, f->src, buf, err, errlen);
    size_t n = (size_t)f->rows * (size_t)f->cols, pn = n / (size_t)f->n_parts;
    (void)nbytes; /* pn elements of 4 or 2 bytes */
    if (!f->transpose) { /* a part of the rows, as it is or rounded to bf16 */
        float *tmp = f->bf16 ? malloc((pn ? pn : 1) * sizeof(float)) : buf;
        if (!tmp) return st_fail(err, errlen, "%s: out of memory exporting '%s'", ckpt_path(f->ck), f->src);
        int rc = read_part(f, tmp, err, errlen);
        if (rc == 0 && f->bf16) dt_ops_cpu.to_bf16(buf, tmp, pn);
        if (f->bf16) free(tmp);
        return rc;
    }
    float *tmp = malloc(n * sizeof(float)), *t2 = f->transpose && f->bf16 ? malloc(n * sizeof(float)) : NULL;
    if (!tmp || (f->transpose && f->bf16 && !t2)) {
        free(tmp);
        return st_fail(err, errlen, "%s: out of memory exporting '%s'", ckpt_path(f->ck), f->src);
    }
    int rc = ckpt_read_global(f->ck, f->src, tmp, err, errlen);
    const float *src = tmp + (size_t)f->part * pn;
    if (rc == 0 && f->transpose) { /* one part (GPT-2's Conv1D) */
        float *dst = f->bf16 ? t2 : buf;
        for (int64_t r = 0; r < f->rows; r++)
            for (int64_t c = 0; c < f->cols; c++) dst[c * f->rows + r] = tmp[r * f->cols + c];
        src = dst;
    }
    if (rc == 0 && f->bf16) dt_ops_cpu.to_bf16(buf, src, pn);
    else if (rc == 0 && src != buf) memcpy(buf, src, pn * sizeof(float));
    free(t2);
    free(tmp);
    return rc;
}

int ckpt_export(const ckpt *ck, const char *out_path, ckpt_naming naming, char *err, size_t errlen)
{
    return ckpt_export_as(ck, out_path, naming, 0, err, errlen);
}

/* Checkpoint tensor i's bytes in the exported file(s) (0 for what is not a
 * parameter): what a shard counts. */
static uint64_t export_bytes(const ckpt *ck, int i, int bf16)
{
    const char *name = ckpt_tensor_name(ck, i);
    if (strncmp(name, "param/", 6) != 0) return 0;
    int64_t shape[2];
    int ndim = ckpt_tensor_shape(ck, name, shape);
    return (uint64_t)shape[0] * (uint64_t)(ndim == 2 ? shape[1] : 1) * (bf16 ? 2u : 4u);
}

/* The parameters of the checkpoint whose shard_of[] is `shard` (all of them
 * when shard_of is NULL) into one file. */
static int export_file(const ckpt *ck, const char *out_path, ckpt_naming naming, int bf16, const int *shard_of,
                       int shard, char *err, size_t errlen);

int ckpt_export_as(const ckpt *ck, const char *out_path, ckpt_naming naming, int bf16, char *err, size_t errlen)
{
    return export_file(ck, out_path, naming, bf16, NULL, 0, err, errlen);
}

/* What Mixtral cannot compute: every block MoE, a softmax router whose top
 * k weights are normalised, no shared experts, no routing bias. A model
 * trained otherwise is refused in one line rather than exported as another
 * function. (A capacity is a training-time drop: Mixtral runs the same
 * weights dropless.) */
static int mixtral_refuses(const ckpt *ck, const job_model *m, char *err, size_t errlen)
{
    const job_moe *e = m ? &m->moe : NULL;
    const char *why = !e || e->experts < 1                          ? "it has no experts"
                      : e->router != ROUTER_SOFTMAX                 ? "its router is sigmoid, Mixtral's softmax"
                      : !e->norm_top_k                              ? "its top-k weights are not normalised"
                      : e->shared_experts > 0                       ? "it has shared experts"
                      : e->first_dense > 0 || (e->every > 1 && m->n_layer > 1) ? "some of its blocks are dense"
                                                                                : NULL;
    for (int i = 0; !why && i < ckpt_tensor_count(ck); i++) {
        const char *name = ckpt_tensor_name(ck, i);
        size_t n = strlen(name);
        int64_t shape[2];
        if (strncmp(name, "state/", 6) != 0 || n < 9 || strcmp(name + n - 9, ".moe.bias") != 0) continue;
        if (ckpt_tensor_shape(ck, name, shape) < 0) continue;
        float *b = malloc((size_t)shape[0] * sizeof(float));
        if (!b || ckpt_read_global(ck, name, b, err, errlen) != 0) {
            free(b);
            return -1;
        }
        for (int64_t k = 0; k < shape[0] && !why; k++)
            if (b[k] != 0.0f) why = "its routing biases (model.moe.bias_update_rate) are not zero";
        free(b);
    }
    if (!why) return 0;
    st_fail(err, errlen, "%s: cannot export as Hugging Face Mixtral: %s (MixtralForCausalLM routes every block by a "
                         "softmax over the experts, top-k weights normalised, no shared experts)", ckpt_path(ck), why);
    return -1;
}

static int export_file(const ckpt *ck, const char *out_path, ckpt_naming naming, int bf16, const int *shard_of,
                       int shard, char *err, size_t errlen)
{
    const ckpt_info *info = ckpt_get_info(ck);
    if (info->has_model && job_lora_on(&info->model))
        return st_fail(err, errlen, "%s holds train.lora's adapters, not a model: export --lora merged OUTDIR/ (the "
                                    "base with the adapters folded in) or --lora adapter OUTDIR/ (a PEFT folder)",
                       ckpt_path(ck));
    if (naming == CKPT_NAMES_AUTO) {
        if (!info->has_model)
            return st_fail(err, errlen, "%s/index.json: no model section (cannot tell GPT from ViT; name the format)",
                        ckpt_path(ck));
        naming = info->model.kind == MODEL_VIT ? CKPT_NAMES_TIMM_VIT : hf_naming_of(&info->model);
    }
    const char *fmt_name = hf_naming_label(naming);
    const job_model *jm = info->has_model ? &info->model : NULL;
    if (naming == CKPT_NAMES_HF_MIXTRAL && mixtral_refuses(ck, jm, err, errlen)) return -1;
    int n = ckpt_tensor_count(ck);
    size_t slots = 1; /* a file tensor each: some of ours are several (hf_name_of) */
    for (int i = 0; i < n; i++) {
        const char *name = ckpt_tensor_name(ck, i);
        int64_t shape[2];
        if (strncmp(name, "param/", 6) != 0) continue;
        int ndim = ckpt_tensor_shape(ck, name, shape), k = hf_name_of(name + 6, ndim, shape, naming, jm, NULL, 0);
        slots += k > 0 ? (size_t)k : 1;
    }
    fill_ctx *ctx = calloc(slots, sizeof *ctx);
    hf_tensor *t = NULL;
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
        if (shard_of && shard_of[i] != shard) continue;
        int64_t shape[2];
        int ndim = ckpt_tensor_shape(ck, name, shape);
        int n_parts = hf_name_of(name + 6, ndim, shape, naming, jm, NULL, 0);
        free(t);
        t = n_parts > 0 ? calloc((size_t)n_parts, sizeof *t) : NULL;
        if (n_parts > 0 && !t) {
            st_fail(err, errlen, "%s: out of memory", out_path);
            goto out;
        }
        if (n_parts > 0) n_parts = hf_name_of(name + 6, ndim, shape, naming, jm, t, n_parts);
        if (n_parts < 1) {
            st_fail(err, errlen, "%s: no %s name for '%s' (shape [%lld, %lld])", ckpt_path(ck), fmt_name, name,
                 (long long)shape[0], (long long)shape[1]);
            goto out;
        }
        for (int k = 0; k < n_parts; k++) {
            fill_ctx *f = &ctx[exported++];
            f->ck = ck;
            snprintf(f->src, sizeof f->src, "%s", name);
            f->transpose = t[k].transpose;
            f->rows = shape[0];
            f->cols = ndim == 2 ? shape[1] : 1;
            f->part = k;
            f->n_parts = n_parts;
            f->bf16 = bf16;
            if (st_writer_add_fill(w, t[k].name, bf16 ? ST_BF16 : ST_F32, t[k].ndim, t[k].shape, fill, f, err,
                                   errlen) != 0)
                goto out;
        }
    }
    if (exported == 0) {
        st_fail(err, errlen, "%s: no parameters to export", ckpt_path(ck));
        goto out;
    }
    rc = ckpt_io_write_st_atomic(out_path, w, err, errlen);
out:
    st_writer_free(w);
    free(t);
    free(ctx);
    return rc;
}

/* config.json of a GPT-2 folder: the keys transformers' GPT2Config and
 * model.init_from read (the GELU and eps the model computes with, GPT-2's
 * tanh and 1e-5 by default; the tied head). */
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
    cJSON_AddStringToObject(c, "activation_function", m->activation == ACT_GELU ? "gelu" : "gelu_new");
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", job_model_norm_eps(m));
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

/* config.json of a ViT folder: ViTConfig's keys (transformers'
 * ViTForImageClassification; model.init_from reads the same). The labels are
 * transformers' defaults, LABEL_i: a dtrun run knows its classes by index. */
static char *vit_config_json(const job_model *m)
{
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    if (arch) cJSON_AddItemToArray(arch, cJSON_CreateString("ViTForImageClassification"));
    cJSON_AddStringToObject(c, "model_type", "vit");
    cJSON_AddNumberToObject(c, "hidden_size", m->d_model);
    cJSON_AddNumberToObject(c, "num_hidden_layers", m->n_layer);
    cJSON_AddNumberToObject(c, "num_attention_heads", m->n_head);
    cJSON_AddNumberToObject(c, "intermediate_size", m->d_ff);
    cJSON_AddStringToObject(c, "hidden_act", m->activation == ACT_GELU ? "gelu" : "gelu_pytorch_tanh");
    cJSON_AddNumberToObject(c, "layer_norm_eps", job_model_norm_eps(m));
    cJSON_AddNumberToObject(c, "image_size", m->image_size);
    cJSON_AddNumberToObject(c, "patch_size", m->patch_size);
    cJSON_AddNumberToObject(c, "num_channels", m->channels);
    cJSON_AddBoolToObject(c, "qkv_bias", 1);
    cJSON_AddNumberToObject(c, "hidden_dropout_prob", 0.0);
    cJSON_AddNumberToObject(c, "attention_probs_dropout_prob", 0.0);
    cJSON_AddNumberToObject(c, "encoder_stride", m->patch_size);
    cJSON *id2label = cJSON_AddObjectToObject(c, "id2label"), *label2id = cJSON_AddObjectToObject(c, "label2id");
    for (int k = 0; id2label && label2id && k < m->n_classes; k++) {
        char id[16], label[32];
        snprintf(id, sizeof id, "%d", k);
        snprintf(label, sizeof label, "LABEL_%d", k);
        cJSON_AddStringToObject(id2label, id, label);
        cJSON_AddNumberToObject(label2id, label, k);
    }
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

/* preprocessor_config.json of a ViT folder: transformers' ViTImageProcessor
 * keys, normalising pixels as dtrun's data loader does (data.h). */
static char *vit_preprocessor_json(const job_model *m)
{
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddStringToObject(c, "image_processor_type", "ViTImageProcessor");
    cJSON_AddBoolToObject(c, "do_resize", 1);
    cJSON *size = cJSON_AddObjectToObject(c, "size");
    if (size) {
        cJSON_AddNumberToObject(size, "height", m->image_size);
        cJSON_AddNumberToObject(size, "width", m->image_size);
    }
    cJSON_AddNumberToObject(c, "resample", 2); /* bilinear */
    cJSON_AddBoolToObject(c, "do_rescale", 1);
    cJSON_AddNumberToObject(c, "rescale_factor", 1.0 / 255.0);
    cJSON_AddBoolToObject(c, "do_normalize", 1);
    cJSON *mean = cJSON_AddArrayToObject(c, "image_mean"), *std = cJSON_AddArrayToObject(c, "image_std");
    for (int k = 0; mean && std && k < m->channels; k++) {
        cJSON_AddItemToArray(mean, cJSON_CreateNumber(DATA_PIXEL_MEAN));
        cJSON_AddItemToArray(std, cJSON_CreateNumber(DATA_PIXEL_STD));
    }
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

/* DIR/name holds text and a newline (atomically); text is freed. */
int ckpt_write_json(const char *dir, const char *name, char *text, char *err, size_t errlen)
{
    if (!text) return st_fail(err, errlen, "%s: out of memory", dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) {
        free(text);
        return st_fail(err, errlen, "%s: out of memory", dir);
    }
    line[n] = '\n';
    int rc = ckpt_io_write_bytes_atomic(path, line, n + 1, err, errlen);
    free(line);
    return rc;
}

/* config.json of a Llama folder: LlamaConfig's keys (transformers'
 * LlamaForCausalLM; model.init_from reads the same), the function dtrun's
 * Llama computes: SiLU, no biases, unscaled RoPE. */
static char *llama_config_json(const job_model *m)
{
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    if (arch) cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "llama");
    cJSON_AddNumberToObject(c, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(c, "hidden_size", m->d_model);
    cJSON_AddNumberToObject(c, "intermediate_size", m->d_ff);
    cJSON_AddNumberToObject(c, "num_hidden_layers", m->n_layer);
    cJSON_AddNumberToObject(c, "num_attention_heads", m->n_head);
    cJSON_AddNumberToObject(c, "num_key_value_heads", job_model_kv_heads(m));
    cJSON_AddNumberToObject(c, "head_dim", m->d_model / m->n_head);
    cJSON_AddNumberToObject(c, "max_position_embeddings", job_model_max_positions(m));
    cJSON_AddNumberToObject(c, "rope_theta", job_model_rope_theta(m));
    cJSON_AddNullToObject(c, "rope_scaling");
    cJSON_AddNumberToObject(c, "rms_norm_eps", job_model_norm_eps(m));
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddBoolToObject(c, "mlp_bias", 0);
    cJSON_AddNumberToObject(c, "attention_dropout", 0.0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", m->tie_embeddings);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

/* config.json of a Mixtral folder (MixtralConfig, MixtralForCausalLM): the
 * Llama's keys with the experts'. intermediate_size is an expert's hidden
 * width; the router is Mixtral's (softmax, top k normalised); the balance
 * loss's coefficient as trained. */
static char *mixtral_config_json(const job_model *m, char *llama)
{
    cJSON *c = llama ? cJSON_Parse(llama) : NULL;
    free(llama);
    if (!c) return NULL;
    cJSON_ReplaceItemInObject(c, "model_type", cJSON_CreateString("mixtral"));
    cJSON *arch = cJSON_CreateArray();
    if (arch) cJSON_AddItemToArray(arch, cJSON_CreateString("MixtralForCausalLM"));
    cJSON_ReplaceItemInObject(c, "architectures", arch);
    cJSON_ReplaceItemInObject(c, "intermediate_size", cJSON_CreateNumber(m->moe.d_ff_expert));
    cJSON_DeleteItemFromObject(c, "head_dim");
    cJSON_DeleteItemFromObject(c, "attention_bias");
    cJSON_DeleteItemFromObject(c, "mlp_bias");
    cJSON_AddNumberToObject(c, "num_local_experts", m->moe.experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", m->moe.top_k);
    cJSON_AddNumberToObject(c, "router_aux_loss_coef", m->moe.aux_loss_coef);
    cJSON_AddBoolToObject(c, "output_router_logits", 0);
    cJSON_AddNullToObject(c, "sliding_window");
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

char *ckpt_hf_config_json(const job_model *m)
{
    if (m->kind == MODEL_VIT) return vit_config_json(m);
    if (m->kind != MODEL_LLAMA) return gpt2_config_json(m);
    char *llama = llama_config_json(m);
    return hf_naming_of(m) == CKPT_NAMES_HF_MIXTRAL ? mixtral_config_json(m, llama) : llama;
}

/* model.safetensors.index.json: every exported tensor's file. */
static char *shard_index_json(const ckpt *ck, ckpt_naming naming, int bf16, const int *shard_of, int n_shards)
{
    const ckpt_info *info = ckpt_get_info(ck);
    cJSON *c = cJSON_CreateObject(), *meta = c ? cJSON_AddObjectToObject(c, "metadata") : NULL;
    cJSON *map = c ? cJSON_AddObjectToObject(c, "weight_map") : NULL;
    if (!meta || !map) {
        cJSON_Delete(c);
        return NULL;
    }
    uint64_t total = 0;
    for (int i = 0; i < ckpt_tensor_count(ck); i++) {
        const char *name = ckpt_tensor_name(ck, i);
        uint64_t b = export_bytes(ck, i, bf16);
        if (!b) continue;
        total += b;
        int64_t shape[2];
        int ndim = ckpt_tensor_shape(ck, name, shape);
        int n_parts = hf_name_of(name + 6, ndim, shape, naming, &info->model, NULL, 0);
        hf_tensor *t = n_parts > 0 ? calloc((size_t)n_parts, sizeof *t) : NULL;
        if (t) n_parts = hf_name_of(name + 6, ndim, shape, naming, &info->model, t, n_parts);
        char file[64];
        snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", shard_of[i] + 1, n_shards);
        for (int k = 0; t && k < n_parts; k++) cJSON_AddStringToObject(map, t[k].name, file);
        free(t);
    }
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

/* The parameters into files of at most max bytes, whole tensors in order
 * (a tensor larger than max alone in its file); their count. */
static int plan_shards(const ckpt *ck, int bf16, uint64_t max, int *shard_of)
{
    int shard = 0;
    uint64_t in_shard = 0;
    for (int i = 0; i < ckpt_tensor_count(ck); i++) {
        uint64_t b = export_bytes(ck, i, bf16);
        shard_of[i] = -1;
        if (!b) continue;
        if (in_shard > 0 && in_shard + b > max) shard++, in_shard = 0;
        shard_of[i] = shard;
        in_shard += b;
    }
    return shard + 1;
}

int ckpt_export_hf_dir(const ckpt *ck, const char *dir, int bf16, char *err, size_t errlen)
{
    return ckpt_export_hf_dir_sharded(ck, dir, bf16, 0, err, errlen);
}

int ckpt_export_hf_dir_sharded(const ckpt *ck, const char *dir, int bf16, uint64_t max_shard_bytes, char *err,
                               size_t errlen)
{
    const ckpt_info *info = ckpt_get_info(ck);
    if (!info->has_model)
        return st_fail(err, errlen, "%s/index.json: no model section (cannot tell GPT from ViT)", ckpt_path(ck));
    const job_model *m = &info->model;
    if (job_lora_on(m))
        return st_fail(err, errlen, "%s holds train.lora's adapters, not a model: export --lora merged (the base with "
                                    "the adapters folded in) or --lora adapter (a PEFT folder)", ckpt_path(ck));
    int vit = m->kind == MODEL_VIT;
    ckpt_naming naming = hf_naming_of(m);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return st_fail(err, errlen, "%s: cannot create (%s)", dir, strerror(errno));
    int n = ckpt_tensor_count(ck);
    int *shard_of = calloc((size_t)n + 1, sizeof *shard_of);
    if (!shard_of) return st_fail(err, errlen, "%s: out of memory", dir);
    int shards = plan_shards(ck, bf16, max_shard_bytes ? max_shard_bytes : CKPT_HF_SHARD_DEFAULT, shard_of);
    char path[4096];
    int rc = 0;
    if (shards == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = export_file(ck, path, naming, bf16, NULL, 0, err, errlen);
    }
    for (int k = 0; shards > 1 && k < shards && rc == 0; k++) {
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, k + 1, shards);
        rc = export_file(ck, path, naming, bf16, shard_of, k, err, errlen);
    }
    if (rc == 0 && shards > 1)
        rc = ckpt_write_json(dir, "model.safetensors.index.json", shard_index_json(ck, naming, bf16, shard_of, shards), err,
                        errlen);
    free(shard_of);
    if (rc != 0) return -1;
    char *config = ckpt_hf_config_json(m);
    if (ckpt_write_json(dir, "config.json", config, err, errlen) != 0) return -1;
    return vit ? ckpt_write_json(dir, "preprocessor_config.json", vit_preprocessor_json(m), err, errlen) : 0;
}
