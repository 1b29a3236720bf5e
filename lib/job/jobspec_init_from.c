/* jobspec_init_from.c — `model.init_from: DIR`: the shape keys from the Hugging
 * Face config.json in DIR.
 *
 * A pretrained model's shape is not the user's to choose: GPT-2's config.json
 * names it (n_layer, n_head, n_embd, vocab_size, n_positions, n_inner). Those
 * values fill the model section; a key the job gives itself (or its preset
 * gives) must agree, or the job is refused with one line pointing at that key.
 * seq_len is the one exception: it may be shorter than n_positions (training
 * on shorter windows uses the first seq_len rows of wpe, as nanoGPT's
 * crop_block_size), never longer (those positions have no embedding).
 *
 * The checks of GPT-2's fixed choices that dtrun's kernels hard-wire (tanh
 * GELU, layernorm eps 1e-5, the LM head tied to wte) are here too: a model
 * built otherwise would load and compute something else.
 *
 * Only the config is read here (lib/ never opens tensors); the weights are the
 * worker's business (runtime/ckpt/hf_import.c). */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec_loader.h"
#include "lib/job/jobspec_presets.h"

#define CONFIG_MAX (1u << 20) /* a config.json is a few hundred bytes */

/* DIR/config.json as text (malloc'd), or NULL with why. */
static char *read_config(const char *path, char *why, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, n, "cannot open (%s)", strerror(errno));
        return NULL;
    }
    char *buf = malloc(CONFIG_MAX + 1);
    size_t len = buf ? fread(buf, 1, CONFIG_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad || len > CONFIG_MAX) {
        snprintf(why, n, "%s", !buf ? "out of memory" : bad ? "read error" : "larger than 1 MiB (not a config.json)");
        free(buf);
        return NULL;
    }
    buf[len] = 0;
    return buf;
}

/* One size key of config.json and the model field it fills. */
typedef struct {
    const char *key;  /* config.json's name */
    const char *alt;  /* an older name for it (GPT-2's n_ctx), or NULL */
    int fid;          /* the job field */
} size_key;

static const size_key gpt2_sizes[] = {
    {"n_layer", NULL, FID_N_LAYER},       {"n_head", NULL, FID_N_HEAD},
    {"n_embd", NULL, FID_D_MODEL},        {"vocab_size", NULL, FID_VOCAB_SIZE},
    {"n_positions", "n_ctx", FID_SEQ_LEN},
};

/* Who set field fid's current value: the file's key (explicitly), the preset,
 * or nobody (the tiny default, free to overwrite). -1 for nobody. */
static int setter_of(const loader *L, int fid)
{
    if (L->e[fid].given) return fid;
    if (L->e[FID_MODEL_PRESET].given) return FID_MODEL_PRESET;
    return -1;
}

static int disagree(loader *L, int fid, const char *cfg, const char *key, long want, long have)
{
    char name[64];
    job_field_full_name(fid, name, sizeof name);
    int blame = setter_of(L, fid);
    if (blame == FID_MODEL_PRESET)
        return loader_fail_value(L, FID_MODEL_PRESET,
                                 "model.preset '%s' has %s %ld but %s says %s %ld (model.init_from's weights)",
                                 L->job->model.preset, name, have, cfg, key, want);
    return loader_fail_value(L, fid, "%s %ld disagrees with %s: %s %ld (model.init_from's weights)", name, have,
                             cfg, key, want);
}

/* An integer of config.json: 0 with *v; 1 when absent or null; -1 when not an integer. */
static int config_int(const cJSON *root, const char *key, long *v)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) return 1;
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || fabs(it->valuedouble) > 1e15)
        return -1;
    *v = (long)it->valuedouble;
    return 0;
}

static int apply_gpt2(loader *L, const cJSON *root, const char *cfg, int *preset_d_ff)
{
    job_model *m = &L->job->model;
    if (m->kind != MODEL_GPT) {
        int blame = L->e[FID_MODEL_KIND].given ? FID_MODEL_KIND : FID_MODEL_PRESET;
        return loader_fail_value(L, blame, "model.kind is vit but %s describes a GPT-2 (model_type gpt2)", cfg);
    }
    for (size_t i = 0; i < sizeof gpt2_sizes / sizeof gpt2_sizes[0]; i++) {
        const size_key *k = &gpt2_sizes[i];
        const char *key = k->key;
        long v = 0;
        int rc = config_int(root, key, &v);
        if (rc == 1 && k->alt) rc = config_int(root, key = k->alt, &v);
        if (rc != 0)
            return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: %s %s", cfg, key,
                                     rc > 0 ? "is missing" : "is not an integer");
        if (job_field_in_range(k->fid, (double)v) != 0) {
            char range[96];
            job_field_range_text(k->fid, range, sizeof range);
            return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: %s %ld is out of range (%s)", cfg, key,
                                     v, range);
        }
        int *field = job_field_ptr(L->job, k->fid);
        if (setter_of(L, k->fid) >= 0) {
            /* seq_len may crop the positions, never exceed them */
            int ok = k->fid == FID_SEQ_LEN ? *field <= v : *field == v;
            if (!ok) {
                if (k->fid == FID_SEQ_LEN)
                    return loader_fail_value(L, setter_of(L, k->fid) == FID_MODEL_PRESET ? FID_MODEL_PRESET : FID_SEQ_LEN,
                                             "model.seq_len %d is longer than %s: %s %ld (no position embedding "
                                             "beyond it)", *field, cfg, key, v);
                return disagree(L, k->fid, cfg, key, v, *field);
            }
        } else {
            *field = (int)v;
        }
    }
    long inner = 0;
    int rc = config_int(root, "n_inner", &inner);
    if (rc < 0) return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: n_inner is not an integer", cfg);
    if (rc == 1) inner = 4L * m->d_model; /* GPT-2: null means 4 * n_embd */
    if (L->e[FID_D_FF].given && m->d_ff != inner) return disagree(L, FID_D_FF, cfg, "n_inner", inner, m->d_ff);
    *preset_d_ff = (int)inner; /* derive() fills d_ff from it when the file does not */

    /* GPT-2's fixed choices, which dtrun's kernels hard-wire */
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "activation_function");
    if (act && !(cJSON_IsString(act) && (!strcmp(act->valuestring, "gelu_new") ||
                                         !strcmp(act->valuestring, "gelu_pytorch_tanh"))))
        return loader_fail_value(L, FID_INIT_FROM,
                                 "model.init_from: %s: activation_function %s is not GPT-2's tanh GELU (gelu_new), "
                                 "the only one dtrun computes", cfg, cJSON_IsString(act) ? act->valuestring : "(not a string)");
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(root, "layer_norm_epsilon");
    if (eps && !(cJSON_IsNumber(eps) && fabs(eps->valuedouble - 1e-5) <= 1e-12))
        return loader_fail_value(L, FID_INIT_FROM,
                                 "model.init_from: %s: layer_norm_epsilon %g is not 1e-05, the one dtrun's layernorm uses",
                                 cfg, cJSON_IsNumber(eps) ? eps->valuedouble : NAN);
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && cJSON_IsFalse(tie))
        return loader_fail_value(L, FID_INIT_FROM,
                                 "model.init_from: %s: tie_word_embeddings is false; dtrun's LM head is always wte", cfg);
    return 0;
}

int loader_apply_init_from(loader *L, int *preset_d_ff)
{
    job_model *m = &L->job->model;
    if (!L->e[FID_INIT_FROM].given || !m->init_from[0]) return 0;
    char cfg[JOB_PATH_MAX + 16], why[256];
    snprintf(cfg, sizeof cfg, "%s/config.json", m->init_from);
    char *text = read_config(cfg, why, sizeof why);
    if (!text) return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: %s", cfg, why);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: not a JSON object (not a Hugging Face config)",
                                 cfg);
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
    int rc;
    if (t && !strcmp(t, "gpt2")) {
        rc = apply_gpt2(L, root, cfg, preset_d_ff);
    } else {
        char shown[128];
        rc = loader_fail_value(L, FID_INIT_FROM,
                               "model.init_from: %s: model_type %s is not supported (GPT-2, model_type gpt2, is; "
                               "ViT is not yet)", cfg, t ? job_text_show(shown, sizeof shown, t, strlen(t)) : "is missing");
    }
    cJSON_Delete(root);
    return rc;
}
