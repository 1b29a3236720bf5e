/* jobspec_lora.c — train.lora: its defaults, a PEFT adapter's
 * adapter_config.json (train.lora.init_from), and the rules a LoRA job must
 * keep (jobspec.h job_lora).
 *
 * The keys are written as a nested mapping, `lora: {rank: 8, alpha: 16,
 * targets: [q, v]}`, the nested section train.lora (jobspec_yaml.c), and
 * any of them turns LoRA on; what is left out takes PEFT's LoraConfig
 * defaults: rank 8, alpha 8, dropout 0, targets q and v.
 *
 * train.lora.init_from names a PEFT folder. Like model.init_from's
 * config.json, its adapter_config.json is read here, not the tensors: r,
 * lora_alpha, lora_dropout and target_modules fill the keys the job leaves
 * out and must agree with the ones it gives; what dtrun's LoRA does not
 * compute (another peft_type, trained biases, rsLoRA or DoRA, per-module
 * ranks) is refused in one line. The adapters themselves are the worker's
 * (runtime/ckpt/peft.c). */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec_lora.h"


/* PEFT's module names, per model kind, for target bit i (Llama's are
 * LlamaForCausalLM's; GPT-2's are its modules' last two names, which PEFT
 * matches as suffixes; its q, k and v share one c_attn: none). */
static const char *const llama_modules[LORA_N_TARGETS] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                          "gate_proj", "up_proj", "down_proj"};
static const char *const gpt2_modules[LORA_N_TARGETS] = {NULL, NULL, NULL, "attn.c_proj", NULL, "mlp.c_fc",
                                                         "mlp.c_proj"};

const char *job_lora_module_name(const job_model *m, int i)
{
    if (i < 0 || i >= LORA_N_TARGETS) return NULL;
    return m->kind == MODEL_LLAMA ? llama_modules[i] : gpt2_modules[i];
}

static int lora_given(const loader *L)
{
    for (int f = FID_LORA_RANK; f <= FID_LORA_INIT_FROM; f++)
        if (L->e[f].given) return 1;
    return 0;
}

/* A number of the config into a double field: filled when the job left it
 * out, else they must agree. */
static int fill_double(loader *L, int fid, const cJSON *root, const char *cfg, const char *key, double dflt)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    double v = dflt;
    if (it && !cJSON_IsNull(it)) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return loader_fail_value(L, FID_LORA_INIT_FROM, "train.lora.init_from: %s: %s is not a number", cfg, key);
        v = it->valuedouble;
    }
    char name[64];
    job_field_full_name(fid, name, sizeof name);
    if (job_field_in_range(fid, v)) {
        char range[96];
        job_field_range_text(fid, range, sizeof range);
        return loader_fail_value(L, FID_LORA_INIT_FROM, "train.lora.init_from: %s: %s %g is out of range (%s %s)", cfg,
                                 key, v, name, range);
    }
    double *field = job_field_ptr(L->job, fid);
    int *ifield = job_field_ptr(L->job, fid);
    int is_int = job_fields[fid].type == FT_INT;
    if (!L->e[fid].given) {
        if (is_int) *ifield = (int)v;
        else *field = v;
        return 0;
    }
    double have = is_int ? *ifield : *field;
    if (have != v)
        return loader_fail_value(L, fid, "%s %g disagrees with %s: %s %g (train.lora.init_from's adapter)", name, have,
                                 cfg, key, v);
    return 0;
}

/* target_modules: a list of module names (or PEFT's one string, a regex,
 * which dtrun does not read), into target bits. */
static int config_targets(loader *L, const cJSON *root, const char *cfg, int *bits)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "target_modules");
    *bits = 0;
    if (!cJSON_IsArray(t))
        return loader_fail_value(L, FID_LORA_INIT_FROM,
                                 "train.lora.init_from: %s: target_modules is %s (a list of module names is read)", cfg,
                                 cJSON_IsString(t) ? "a pattern" : t ? "not a list" : "missing");
    const cJSON *x;
    cJSON_ArrayForEach(x, t)
    {
        int i = 0;
        if (!cJSON_IsString(x))
            return loader_fail_value(L, FID_LORA_INIT_FROM, "train.lora.init_from: %s: target_modules holds a non-name",
                                     cfg);
        while (i < LORA_N_TARGETS &&
               (!job_lora_module_name(&L->job->model, i) || strcmp(x->valuestring, job_lora_module_name(&L->job->model, i))))
            i++;
        if (i == LORA_N_TARGETS) {
            char shown[128];
            return loader_fail_value(L, FID_LORA_INIT_FROM,
                                     "train.lora.init_from: %s: target_modules names '%s', which a %s model has no "
                                     "LoRA for",
                                     cfg, job_text_show(shown, sizeof shown, x->valuestring, strlen(x->valuestring)),
                                     job_model_kind_name(L->job->model.kind));
        }
        *bits |= 1 << i;
    }
    return 0;
}

/* What PEFT can save that dtrun does not compute: one line each. */
static int config_refuse(loader *L, const cJSON *root, const char *cfg)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "LORA")))
        return loader_fail_value(L, FID_LORA_INIT_FROM, "train.lora.init_from: %s: peft_type is not LORA", cfg);
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(root, "bias");
    if (bias && !cJSON_IsNull(bias) && !(cJSON_IsString(bias) && !strcmp(bias->valuestring, "none")))
        return loader_fail_value(L, FID_LORA_INIT_FROM,
                                 "train.lora.init_from: %s: bias is not \"none\" (dtrun's LoRA trains no biases)", cfg);
    static const char *const flags[] = {"use_rslora", "use_dora"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, flags[i]);
        if (cJSON_IsTrue(f))
            return loader_fail_value(L, FID_LORA_INIT_FROM, "train.lora.init_from: %s: %s is true (dtrun computes plain "
                                                            "LoRA: alpha / r, A then B)", cfg, flags[i]);
    }
    static const char *const maps[] = {"rank_pattern", "alpha_pattern"};
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, maps[i]);
        if (f && cJSON_IsObject(f) && f->child)
            return loader_fail_value(L, FID_LORA_INIT_FROM, "train.lora.init_from: %s: %s gives modules ranks of their "
                                                            "own (dtrun's adapters share one rank and alpha)", cfg, maps[i]);
    }
    const cJSON *save = cJSON_GetObjectItemCaseSensitive(root, "modules_to_save");
    if (cJSON_IsArray(save) && cJSON_GetArraySize(save) > 0)
        return loader_fail_value(L, FID_LORA_INIT_FROM, "train.lora.init_from: %s: modules_to_save trains whole "
                                                        "modules besides the adapters (dtrun freezes every base weight)",
                                 cfg);
    return 0;
}

static int apply_adapter_config(loader *L)
{
    job_lora *lo = &L->job->model.lora;
    char cfg[JOB_PATH_MAX + 32], why[256];
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", lo->init_from);
    char *text = loader_read_json_file(cfg, why, sizeof why);
    if (!text) return loader_fail_value(L, FID_LORA_INIT_FROM, "train.lora.init_from: %s: %s", cfg, why);
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = 0, bits = 0;
    if (!root || !cJSON_IsObject(root))
        rc = loader_fail_value(L, FID_LORA_INIT_FROM, "train.lora.init_from: %s: not a JSON object (not a PEFT "
                                                      "adapter config)", cfg);
    if (rc == 0) rc = config_refuse(L, root, cfg);
    if (rc == 0) rc = fill_double(L, FID_LORA_RANK, root, cfg, "r", 8);
    if (rc == 0) rc = fill_double(L, FID_LORA_ALPHA, root, cfg, "lora_alpha", 8);
    if (rc == 0) rc = fill_double(L, FID_LORA_DROPOUT, root, cfg, "lora_dropout", 0);
    if (rc == 0) rc = config_targets(L, root, cfg, &bits);
    if (rc == 0 && !L->e[FID_LORA_TARGETS].given) lo->targets = bits;
    else if (rc == 0 && lo->targets != bits)
        rc = loader_fail_value(L, FID_LORA_TARGETS, "train.lora.targets disagrees with %s: target_modules (train.lora."
                                                    "init_from's adapter)", cfg);
    cJSON_Delete(root);
    return rc;
}

int loader_derive_lora(loader *L)
{
    job_lora *lo = &L->job->model.lora;
    if (!lora_given(L) || !job_model_is_lm(&L->job->model)) return 0;
    if (lo->init_from[0] && apply_adapter_config(L)) return -1;
    if (!L->e[FID_LORA_RANK].given && !lo->rank) lo->rank = 8;
    if (!L->e[FID_LORA_ALPHA].given && lo->alpha == 0) lo->alpha = 8;
    if (!L->e[FID_LORA_TARGETS].given && !lo->targets) lo->targets = LORA_Q | LORA_V;
    return 0;
}

int job_check_lora(const job_spec *job, int *blame, char *msg, size_t n)
{
    const job_model *m = &job->model;
    const job_lora *lo = &m->lora;
    const job_parallel *par = &job->parallel;
    blame[1] = -1;
    if (!job_lora_on(m)) return 0;
    if (m->moe.experts > 0) {
        blame[0] = FID_LORA_RANK, blame[1] = FID_MOE_EXPERTS, blame[2] = -1;
        snprintf(msg, n, "train.lora with model.moe: adapters on the experts' stacked weights are not implemented; "
                         "fine-tune a dense model, or drop train.lora");
        return -1;
    }
    if (job_model_mla(m)) {
        blame[0] = FID_LORA_RANK, blame[1] = FID_MLA_KV_LORA_RANK, blame[2] = -1;
        snprintf(msg, n, "train.lora with model.mla: multi-head latent attention is counted by --dry-run, not "
                         "trained; drop train.lora or model.mla");
        return -1;
    }
    if (!lo->targets) {
        blame[0] = FID_LORA_TARGETS;
        snprintf(msg, n, "train.lora.targets is empty (name the layers to adapt: q, k, v, o, %s)",
                 m->kind == MODEL_LLAMA ? "gate, up, down" : "up, down");
        return -1;
    }
    if (m->kind == MODEL_GPT && (lo->targets & LORA_GATE)) {
        blame[0] = FID_LORA_TARGETS;
        snprintf(msg, n, "train.lora.targets: a gpt model has no gate (its MLP is fc then proj, GELU between: name them "
                         "up and down)");
        return -1;
    }
    int kv = job_model_kv_heads(m);
    if (m->kind == MODEL_LLAMA && par->tp > kv && (lo->targets & (LORA_K | LORA_V))) {
        blame[0] = FID_LORA_TARGETS, blame[1] = FID_TP, blame[2] = -1;
        snprintf(msg, n, "train.lora.targets k and v with parallel.tp %d above model.n_kv_head %d: the replicated "
                         "key/value heads' adapters are not summed over their replicas; adapt q, o and the MLP, or "
                         "set tp <= %d", par->tp, kv, kv);
        return -1;
    }
    if (par->pp > 1 && par->pp_schedule == PP_ZB_H1) {
        blame[0] = FID_PP_SCHEDULE, blame[1] = FID_LORA_RANK, blame[2] = -1;
        snprintf(msg, n, "parallel.pp_schedule zb-h1 with train.lora: a frozen base leaves its W pass nothing but "
                         "the adapters, which run in B; use 1f1b");
        return -1;
    }
    if (job->train.offload & OFFLOAD_PARAMS) {
        blame[0] = FID_OFFLOAD, blame[1] = FID_LORA_RANK, blame[2] = -1;
        snprintf(msg, n, "train.offload: params with train.lora: the frozen base is not offloaded (only the "
                         "adapters would move); drop params from train.offload");
        return -1;
    }
    if (job->train.cuda_graphs && lo->dropout > 0) {
        blame[0] = FID_CUDA_GRAPHS, blame[1] = FID_LORA_DROPOUT, blame[2] = -1;
        snprintf(msg, n, "train.cuda_graphs with train.lora.dropout %g: each step's dropout masks follow its samples' "
                         "numbers, set from the host; set dropout 0 or cuda_graphs false", lo->dropout);
        return -1;
    }
    return 0;
}
