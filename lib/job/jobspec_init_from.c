/* jobspec_init_from.c — `model.init_from: DIR`: the shape keys from the Hugging
 * Face config.json in DIR.
 *
 * A pretrained model's shape is not the user's to choose: GPT-2's config.json
 * names it (n_layer, n_head, n_embd, vocab_size, n_positions, n_inner), ViT's
 * too (num_hidden_layers, num_attention_heads, hidden_size, intermediate_size,
 * image_size, patch_size, num_channels, the labels of id2label). Those values
 * fill the model section; a key the job gives itself (or its preset gives)
 * must agree, or the job is refused with one line pointing at that key.
 * seq_len is the one exception: it may be shorter than n_positions (training
 * on shorter windows uses the first seq_len rows of wpe, as nanoGPT's
 * crop_block_size), never longer (those positions have no embedding).
 *
 * The function the weights were trained for comes from there as well: the
 * GELU (activation_function / hidden_act: tanh or exact) and the layernorm
 * eps (layer_norm_epsilon / layer_norm_eps) fill model.activation and
 * model.norm_eps, under the same rule. What dtrun cannot compute is refused
 * in one line: another activation, an untied GPT-2 head, a ViT without qkv
 * biases, or a ViT architecture other than ViTForImageClassification (class
 * token, final layernorm, linear classifier: dtrun's ViT).
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

char *loader_read_json_file(const char *path, char *why, size_t n)
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
        snprintf(why, n, "%s", !buf ? "out of memory" : bad ? "read error" : "larger than 1 MiB (not a model's JSON config)");
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
static const size_key vit_sizes[] = {
    {"num_hidden_layers", NULL, FID_N_LAYER}, {"num_attention_heads", NULL, FID_N_HEAD},
    {"hidden_size", NULL, FID_D_MODEL},       {"image_size", NULL, FID_IMAGE_SIZE},
    {"patch_size", NULL, FID_PATCH_SIZE},     {"num_channels", NULL, FID_CHANNELS},
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

static int fill_or_agree(loader *L, int fid, const char *cfg, const char *key, long v);

/* One integer size of config.json (absent: dflt, or an error when dflt < 0)
 * into field fid, under the agree-or-fill rule. */
static int apply_size(loader *L, const cJSON *root, const char *cfg, const size_key *k, long dflt)
{
    const char *key = k->key;
    long v = 0;
    int rc = config_int(root, key, &v);
    if (rc == 1 && k->alt) rc = config_int(root, key = k->alt, &v);
    if (rc == 1 && dflt >= 0) v = dflt, rc = 0;
    if (rc != 0)
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: %s %s", cfg, key,
                                 rc > 0 ? "is missing" : "is not an integer");
    return fill_or_agree(L, k->fid, cfg, key, v);
}

/* Field k->fid from config.json's value v of key: filled when nobody set it,
 * else it must agree. */
static int fill_or_agree(loader *L, int fid, const char *cfg, const char *key, long v)
{
    const size_key one = {key, NULL, fid}, *k = &one;
    if (job_field_in_range(k->fid, (double)v) != 0) {
        char range[96];
        job_field_range_text(k->fid, range, sizeof range);
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: %s %ld is out of range (%s)", cfg, key, v,
                                 range);
    }
    int *field = job_field_ptr(L->job, k->fid);
    if (setter_of(L, k->fid) < 0) *field = (int)v;
    else if (*field != v) return disagree(L, k->fid, cfg, key, v, *field);
    return 0;
}

/* The GELU and the layernorm eps of config.json (act_key, eps_key; absent:
 * act_dflt, eps_dflt) into model.activation and model.norm_eps, which a job
 * that sets them must agree with. */
static int apply_function(loader *L, const cJSON *root, const char *cfg, const char *act_key, const char *act_dflt,
                          const char *eps_key, double eps_dflt)
{
    job_model *m = &L->job->model;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, act_key);
    const char *a = act ? (cJSON_IsString(act) ? act->valuestring : "(not a string)") : act_dflt;
    activation_kind want;
    if (!strcmp(a, "gelu")) want = ACT_GELU;
    else if (!strcmp(a, "gelu_new") || !strcmp(a, "gelu_pytorch_tanh")) want = ACT_GELU_TANH;
    else {
        char shown[96];
        return loader_fail_value(L, FID_INIT_FROM,
                                 "model.init_from: %s: %s %s is not a GELU dtrun computes (gelu: exact; gelu_new or "
                                 "gelu_pytorch_tanh: tanh)", cfg, act_key, job_text_show(shown, sizeof shown, a, strlen(a)));
    }
    if (L->e[FID_ACTIVATION].given && m->activation != want)
        return loader_fail_value(L, FID_ACTIVATION, "model.activation %s disagrees with %s: %s %s (%s)",
                                 job_activation_name(m->activation), cfg, act_key, a, job_activation_name(want));
    m->activation = want;
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(root, eps_key);
    double e = eps_dflt;
    if (eps) {
        if (!cJSON_IsNumber(eps) || !(eps->valuedouble > 0 && eps->valuedouble <= 1))
            return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: %s is not a number in (0, 1]", cfg, eps_key);
        e = eps->valuedouble;
    }
    if (L->e[FID_NORM_EPS].given && m->norm_eps != e)
        return loader_fail_value(L, FID_NORM_EPS, "model.norm_eps %g disagrees with %s: %s %g", m->norm_eps, cfg,
                                 eps_key, e);
    m->norm_eps = e;
    return 0;
}

/* model_type vit: ViTForImageClassification's config (ViTConfig). */
static int apply_vit(loader *L, const cJSON *root, const char *cfg, int *preset_d_ff)
{
    job_model *m = &L->job->model;
    if (m->kind != MODEL_VIT) {
        int blame = L->e[FID_MODEL_KIND].given ? FID_MODEL_KIND : FID_MODEL_PRESET;
        if (L->e[FID_MODEL_KIND].given || L->e[FID_MODEL_PRESET].given)
            return loader_fail_value(L, blame, "model.kind is %s but %s describes a ViT (model_type vit)",
                                     job_model_kind_name(m->kind), cfg);
        /* the kind follows the folder when the job does not say (then it gave no
         * ViT-only key: the loader refused those for a GPT); the shared sizes
         * come from config.json below */
        m->kind = MODEL_VIT;
    }
    /* dtrun's ViT is ViTForImageClassification: class token -> final layernorm -> linear classifier */
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (cJSON_IsArray(arch) && cJSON_GetArraySize(arch) > 0) {
        const cJSON *first = cJSON_GetArrayItem(arch, 0);
        const char *name = cJSON_IsString(first) ? first->valuestring : "(not a string)";
        if (strcmp(name, "ViTForImageClassification") != 0) {
            char shown[96];
            return loader_fail_value(L, FID_INIT_FROM,
                                     "model.init_from: %s: architectures %s is not ViTForImageClassification, the "
                                     "one ViT dtrun runs (class token, final layernorm, linear classifier)", cfg,
                                     job_text_show(shown, sizeof shown, name, strlen(name)));
        }
    }
    const cJSON *qkv_bias = cJSON_GetObjectItemCaseSensitive(root, "qkv_bias");
    if (qkv_bias && cJSON_IsFalse(qkv_bias))
        return loader_fail_value(L, FID_INIT_FROM,
                                 "model.init_from: %s: qkv_bias is false; dtrun's attention always has query, key "
                                 "and value biases", cfg);
    for (size_t i = 0; i < sizeof vit_sizes / sizeof vit_sizes[0]; i++)
        if (apply_size(L, root, cfg, &vit_sizes[i], vit_sizes[i].fid == FID_CHANNELS ? 3 : -1)) return -1;
    /* the classes: id2label's entries, else num_labels, else transformers' default 2 */
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(root, "id2label");
    long n_labels = cJSON_IsObject(id2label) ? cJSON_GetArraySize(id2label) : 0;
    if (n_labels == 0 && config_int(root, "num_labels", &n_labels) != 0) n_labels = 2;
    if (fill_or_agree(L, FID_N_CLASSES, cfg, "id2label's labels", n_labels)) return -1;
    long inner = 0;
    int rc = config_int(root, "intermediate_size", &inner);
    if (rc < 0) return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: intermediate_size is not an integer", cfg);
    if (rc == 1) inner = 4L * m->d_model;
    if (L->e[FID_D_FF].given && m->d_ff != inner) return disagree(L, FID_D_FF, cfg, "intermediate_size", inner, m->d_ff);
    *preset_d_ff = (int)inner;
    return apply_function(L, root, cfg, "hidden_act", "gelu", "layer_norm_eps", 1e-12);
}

static int apply_gpt2(loader *L, const cJSON *root, const char *cfg, int *preset_d_ff)
{
    job_model *m = &L->job->model;
    if (m->kind != MODEL_GPT) {
        int blame = L->e[FID_MODEL_KIND].given ? FID_MODEL_KIND : FID_MODEL_PRESET;
        return loader_fail_value(L, blame, "model.kind is %s but %s describes a GPT-2 (model_type gpt2)",
                                 job_model_kind_name(m->kind), cfg);
    }
    for (size_t i = 0; i < sizeof gpt2_sizes / sizeof gpt2_sizes[0]; i++) {
        const size_key *k = &gpt2_sizes[i];
        if (k->fid != FID_SEQ_LEN) {
            if (apply_size(L, root, cfg, k, -1)) return -1;
            continue;
        }
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

    if (apply_function(L, root, cfg, "activation_function", "gelu_new", "layer_norm_epsilon", 1e-5)) return -1;
    /* GPT-2's fixed choice that dtrun's model hard-wires */
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && cJSON_IsFalse(tie))
        return loader_fail_value(L, FID_INIT_FROM,
                                 "model.init_from: %s: tie_word_embeddings is false; dtrun's LM head is always wte", cfg);
    return 0;
}

/* model_type llama: LlamaForCausalLM's config (LlamaConfig), with
 * transformers' defaults for absent keys. What dtrun's Llama does not compute
 * (another RoPE scaling, biases, sliding windows, an activation other than
 * SiLU, a head size other than hidden_size / heads) is refused by name:
 * never a silently different model. */
static const size_key llama_sizes[] = {
    {"num_hidden_layers", NULL, FID_N_LAYER},    {"num_attention_heads", NULL, FID_N_HEAD},
    {"hidden_size", NULL, FID_D_MODEL},          {"intermediate_size", NULL, FID_D_FF},
    {"vocab_size", NULL, FID_VOCAB_SIZE},
};

/* A config key that must be absent, null, false or equal to `ok` (a string). */
static int llama_refuse(loader *L, const cJSON *root, const char *cfg, const char *key, const char *ok,
                        const char *why)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it) || cJSON_IsFalse(it)) return 0;
    if (ok && cJSON_IsString(it) && !strcmp(it->valuestring, ok)) return 0;
    char shown[96] = "";
    if (cJSON_IsString(it)) job_text_show(shown, sizeof shown, it->valuestring, strlen(it->valuestring));
    else if (cJSON_IsNumber(it)) snprintf(shown, sizeof shown, "%g", it->valuedouble);
    else snprintf(shown, sizeof shown, "%s", cJSON_IsTrue(it) ? "true" : "set");
    return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: %s %s is not supported (%s)", cfg, key, shown, why);
}

/* model.moe from a Mixtral config.json (MixtralConfig): the experts, top k
 * and an expert's width (intermediate_size) fill the section, which a job
 * that sets them must agree with; Mixtral's router (softmax, top k
 * normalised, every block, no shared experts) must be what the job asks
 * for; router_aux_loss_coef is the balance loss's coefficient unless the job
 * gives its own. */
static int moe_fill(loader *L, int fid, const char *cfg, const char *key, long v)
{
    if (job_field_in_range(fid, (double)v) != 0) {
        char range[96];
        job_field_range_text(fid, range, sizeof range);
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: %s %ld is out of range (%s)", cfg, key, v,
                                 range);
    }
    int *field = job_field_ptr(L->job, fid);
    if (L->e[fid].given && *field != v) {
        char name[64];
        job_field_full_name(fid, name, sizeof name);
        return loader_fail_value(L, fid, "%s %d disagrees with %s: %s %ld (model.init_from's weights)", name, *field, cfg,
                                 key, v);
    }
    *field = (int)v;
    return 0;
}

static int apply_mixtral_moe(loader *L, const cJSON *root, const char *cfg)
{
    job_model *m = &L->job->model;
    job_moe *e = &m->moe;
    long experts = 0, top_k = 2;
    int rc = config_int(root, "num_local_experts", &experts);
    if (rc != 0)
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: num_local_experts %s", cfg,
                                 rc > 0 ? "is missing" : "is not an integer");
    if (config_int(root, "num_experts_per_tok", &top_k) < 0)
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: num_experts_per_tok is not an integer", cfg);
    if (moe_fill(L, FID_MOE_EXPERTS, cfg, "num_local_experts", experts) ||
        moe_fill(L, FID_MOE_TOP_K, cfg, "num_experts_per_tok", top_k) ||
        moe_fill(L, FID_MOE_D_FF_EXPERT, cfg, "intermediate_size", m->d_ff))
        return -1;
    static const struct { int fid; const char *what; } fixed[] = {
        {FID_MOE_ROUTER, "router softmax"}, {FID_MOE_NORM_TOP_K, "norm_top_k true"},
        {FID_MOE_SHARED_EXPERTS, "shared_experts 0"}, {FID_MOE_EVERY, "every 1"}, {FID_MOE_FIRST_DENSE, "first_dense 0"}};
    int ok[] = {e->router == ROUTER_SOFTMAX, e->norm_top_k == 1, e->shared_experts == 0, e->every == 1,
                e->first_dense == 0};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (!ok[i]) {
            char name[64];
            job_field_full_name(fixed[i].fid, name, sizeof name);
            return loader_fail_value(L, fixed[i].fid, "%s is not Mixtral's (%s describes MixtralForCausalLM: %s)", name,
                                     cfg, fixed[i].what);
        }
    const cJSON *coef = cJSON_GetObjectItemCaseSensitive(root, "router_aux_loss_coef");
    if (coef && !(cJSON_IsNumber(coef) && coef->valuedouble >= 0))
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: router_aux_loss_coef is not a number >= 0", cfg);
    if (coef && !L->e[FID_MOE_AUX_LOSS_COEF].given) e->aux_loss_coef = coef->valuedouble;
    return 0;
}

/* A sliding window the positions never reach is full attention: Mixtral's
 * (and Mistral's) configs carry one (4096, 131072) or null. */
static int window_refuse(loader *L, const cJSON *root, const char *cfg)
{
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    long positions = 2048;
    config_int(root, "max_position_embeddings", &positions);
    if (w && cJSON_IsNumber(w) && w->valuedouble >= (double)positions) return 0;
    return llama_refuse(L, root, cfg, "sliding_window", NULL, "dtrun's attention sees every earlier position; a "
                                                              "window at least max_position_embeddings long is that");
}

static int apply_llama(loader *L, const cJSON *root, const char *cfg, int *preset_d_ff, int mixtral)
{
    job_model *m = &L->job->model;
    const char *family = mixtral ? "a Mixtral (model_type mixtral)" : "a Llama (model_type llama)";
    if (m->kind != MODEL_LLAMA) {
        if (L->e[FID_MODEL_KIND].given || L->e[FID_MODEL_PRESET].given)
            return loader_fail_value(L, L->e[FID_MODEL_KIND].given ? FID_MODEL_KIND : FID_MODEL_PRESET,
                                     "model.kind is %s but %s describes %s", job_model_kind_name(m->kind), cfg, family);
        /* the kind follows the folder, from llama-tiny's shape (config.json
         * fills it); the keys the job gives stay the job's */
        job_preset_apply(job_preset_tiny(MODEL_LLAMA), m);
        for (int f = 0; f < FID_COUNT; f++)
            if (L->e[f].given && job_fields[f].section == SEC_MODEL && f != FID_MODEL_KIND && f != FID_MODEL_PRESET &&
                loader_store_value(L, f))
                return -1;
    }
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (cJSON_IsArray(arch) && cJSON_GetArraySize(arch) > 0) {
        const cJSON *first = cJSON_GetArrayItem(arch, 0);
        const char *name = cJSON_IsString(first) ? first->valuestring : "(not a string)";
        const char *want = mixtral ? "MixtralForCausalLM" : "LlamaForCausalLM";
        if (strcmp(name, want) != 0) {
            char shown[96];
            return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: architectures %s is not %s, the %s dtrun runs",
                                     cfg, job_text_show(shown, sizeof shown, name, strlen(name)), want,
                                     mixtral ? "Mixtral" : "Llama");
        }
    }
    /* rope_scaling: only the plain rotary embedding ({"rope_type": "default"}) */
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (scaling && !cJSON_IsNull(scaling)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(scaling, "rope_type");
        if (!t) t = cJSON_GetObjectItemCaseSensitive(scaling, "type");
        const char *kind = cJSON_IsString(t) ? t->valuestring : "(no rope_type)";
        if (strcmp(kind, "default") != 0) {
            char shown[96];
            return loader_fail_value(L, FID_INIT_FROM,
                                     "model.init_from: %s: rope_scaling of rope_type %s is not supported (dtrun's "
                                     "RoPE is the unscaled one, rope_type default)",
                                     cfg, job_text_show(shown, sizeof shown, kind, strlen(kind)));
        }
    }
    if (llama_refuse(L, root, cfg, "attention_bias", NULL, "dtrun's Llama has no q, k, v, o biases") ||
        llama_refuse(L, root, cfg, "mlp_bias", NULL, "dtrun's Llama has no MLP biases") ||
        (mixtral ? window_refuse(L, root, cfg)
                 : llama_refuse(L, root, cfg, "sliding_window", NULL, "dtrun's Llama attends to every earlier position")) ||
        llama_refuse(L, root, cfg, "use_sliding_window", NULL, "dtrun's Llama attends to every earlier position") ||
        llama_refuse(L, root, cfg, "hidden_act", "silu", "dtrun's Llama MLP is SwiGLU: SiLU of the gate times up"))
        return -1;
    for (size_t i = 0; i < sizeof llama_sizes / sizeof llama_sizes[0]; i++)
        if (apply_size(L, root, cfg, &llama_sizes[i], llama_sizes[i].fid == FID_VOCAB_SIZE ? 32000 : -1)) return -1;
    *preset_d_ff = m->d_ff;
    long heads = m->n_head, kv = 0, hd = 0;
    int rc = config_int(root, "num_key_value_heads", &kv);
    if (rc < 0) return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: num_key_value_heads is not an integer", cfg);
    if (rc == 1) kv = heads; /* transformers: absent means multi-head */
    if (fill_or_agree(L, FID_N_KV_HEAD, cfg, "num_key_value_heads", kv)) return -1;
    rc = config_int(root, "head_dim", &hd);
    if (rc == 0 && (heads < 1 || hd * heads != m->d_model))
        return loader_fail_value(L, FID_INIT_FROM,
                                 "model.init_from: %s: head_dim %ld is not supported (dtrun's heads are hidden_size / "
                                 "num_attention_heads = %ld channels)", cfg, hd, heads > 0 ? m->d_model / heads : 0L);
    /* the positions: max_position_embeddings (default 2048); seq_len, unless
     * the job crops it, trains on all of them */
    long positions = 2048;
    rc = config_int(root, "max_position_embeddings", &positions);
    if (rc < 0 || positions < 1 || positions > (1L << 24))
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: max_position_embeddings is not an integer in "
                                 "1..16777216", cfg);
    if (L->e[FID_MAX_POSITIONS].given && m->max_positions != positions)
        return disagree(L, FID_MAX_POSITIONS, cfg, "max_position_embeddings", positions, m->max_positions);
    m->max_positions = (int)positions;
    if (setter_of(L, FID_SEQ_LEN) < 0) m->seq_len = (int)positions;
    else if (m->seq_len > positions)
        return loader_fail_value(L, setter_of(L, FID_SEQ_LEN), "model.seq_len %d is longer than %s: "
                                 "max_position_embeddings %ld (the positions the model takes)", m->seq_len, cfg,
                                 positions);
    /* the function: rope_theta, rms_norm_eps, tie_word_embeddings */
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(root, "rope_theta");
    double th = 10000.0;
    if (theta && !(cJSON_IsNumber(theta) && theta->valuedouble >= 1 && theta->valuedouble <= 1e12))
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: rope_theta is not a number in [1, 1e12]", cfg);
    if (theta) th = theta->valuedouble;
    if (L->e[FID_ROPE_THETA].given && m->rope_theta != th)
        return loader_fail_value(L, FID_ROPE_THETA, "model.rope_theta %g disagrees with %s: rope_theta %g", m->rope_theta,
                                 cfg, th);
    m->rope_theta = th;
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(root, "rms_norm_eps");
    double e = 1e-6; /* LlamaConfig's default */
    if (eps && !(cJSON_IsNumber(eps) && eps->valuedouble > 0 && eps->valuedouble <= 1))
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: rms_norm_eps is not a number in (0, 1]", cfg);
    if (eps) e = eps->valuedouble;
    if (L->e[FID_NORM_EPS].given && m->norm_eps != e)
        return loader_fail_value(L, FID_NORM_EPS, "model.norm_eps %g disagrees with %s: rms_norm_eps %g", m->norm_eps,
                                 cfg, e);
    m->norm_eps = e;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie))
        return loader_fail_value(L, FID_INIT_FROM, "model.init_from: %s: tie_word_embeddings is not true or false", cfg);
    int tied = tie && cJSON_IsTrue(tie); /* LlamaConfig's default: false */
    if (L->e[FID_TIE_EMBEDDINGS].given && m->tie_embeddings != tied)
        return loader_fail_value(L, FID_TIE_EMBEDDINGS, "model.tie_embeddings %s disagrees with %s: tie_word_embeddings %s",
                                 m->tie_embeddings ? "true" : "false", cfg, tied ? "true" : "false");
    m->tie_embeddings = tied;
    if (mixtral && apply_mixtral_moe(L, root, cfg)) return -1;
    if (!mixtral && m->moe.experts > 0)
        return loader_fail_value(L, FID_MOE_EXPERTS, "model.moe with %s: a Llama's MLP is dense (a Mixtral folder, "
                                 "model_type mixtral, has the experts)", cfg);
    return 0;
}

int loader_apply_init_from(loader *L, int *preset_d_ff)
{
    job_model *m = &L->job->model;
    if (!L->e[FID_INIT_FROM].given || !m->init_from[0]) return 0;
    char cfg[JOB_PATH_MAX + 16], why[256];
    snprintf(cfg, sizeof cfg, "%s/config.json", m->init_from);
    char *text = loader_read_json_file(cfg, why, sizeof why);
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
    } else if (t && !strcmp(t, "vit")) {
        rc = apply_vit(L, root, cfg, preset_d_ff);
    } else if (t && (!strcmp(t, "llama") || !strcmp(t, "mixtral"))) {
        rc = apply_llama(L, root, cfg, preset_d_ff, !strcmp(t, "mixtral"));
    } else {
        char shown[128];
        rc = loader_fail_value(L, FID_INIT_FROM,
                               "model.init_from: %s: model_type %s is not supported (gpt2, vit, llama and mixtral are)", cfg,
                               t ? job_text_show(shown, sizeof shown, t, strlen(t)) : "is missing");
    }
    cJSON_Delete(root);
    return rc;
}
