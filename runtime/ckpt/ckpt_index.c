/* ckpt_index.c — index.json, the commit record of a checkpoint step.
 *
 * Numbers that must be exact beyond 2^53 (the seed, the 64-bit checksums) are
 * strings: JSON numbers are doubles to most readers. The job YAML is last so a
 * person reading the file sees the layout and the files first. */
#include "runtime/ckpt/ckpt_internal.h"

#include <cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* model.moe in the index's model (export's Mixtral check and config.json
 * read it): every key, as the job gave it. */
static int add_moe(cJSON *m, const job_moe *e)
{
    cJSON *o = cJSON_AddObjectToObject(m, "moe");
    return o && cJSON_AddNumberToObject(o, "experts", e->experts) && cJSON_AddNumberToObject(o, "top_k", e->top_k) &&
           cJSON_AddNumberToObject(o, "d_ff_expert", e->d_ff_expert) &&
           cJSON_AddNumberToObject(o, "shared_experts", e->shared_experts) &&
           cJSON_AddNumberToObject(o, "every", e->every) && cJSON_AddNumberToObject(o, "first_dense", e->first_dense) &&
           cJSON_AddStringToObject(o, "router", job_router_name(e->router)) &&
           cJSON_AddBoolToObject(o, "norm_top_k", e->norm_top_k) &&
           cJSON_AddNumberToObject(o, "aux_loss_coef", e->aux_loss_coef) &&
           cJSON_AddNumberToObject(o, "bias_update_rate", e->bias_update_rate) &&
           cJSON_AddNumberToObject(o, "capacity_factor", e->capacity_factor);
}

static int read_moe(const cJSON *o, job_moe *e)
{
    static const char *const ints[] = {"experts", "top_k", "d_ff_expert", "shared_experts", "every", "first_dense"};
    int *dst[] = {&e->experts, &e->top_k, &e->d_ff_expert, &e->shared_experts, &e->every, &e->first_dense};
    for (int i = 0; i < 6; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, ints[i]);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9) return -1;
        *dst[i] = (int)v->valuedouble;
    }
    const cJSON *router = cJSON_GetObjectItemCaseSensitive(o, "router"), *norm = cJSON_GetObjectItemCaseSensitive(o, "norm_top_k");
    if (!cJSON_IsString(router) || !cJSON_IsBool(norm) || e->experts < 1) return -1;
    if (!strcmp(router->valuestring, job_router_name(ROUTER_SIGMOID))) e->router = ROUTER_SIGMOID;
    else if (!strcmp(router->valuestring, job_router_name(ROUTER_SOFTMAX))) e->router = ROUTER_SOFTMAX;
    else return -1;
    e->norm_top_k = cJSON_IsTrue(norm);
    static const char *const dbl[] = {"aux_loss_coef", "bias_update_rate", "capacity_factor"};
    double *dd[] = {&e->aux_loss_coef, &e->bias_update_rate, &e->capacity_factor};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, dbl[i]);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0)) return -1;
        *dd[i] = v->valuedouble;
    }
    return 0;
}

static const struct {
    const char *key;
    size_t off;
} model_ints[] = {
    {"n_layer", offsetof(job_model, n_layer)},       {"n_head", offsetof(job_model, n_head)},
    {"d_model", offsetof(job_model, d_model)},       {"d_ff", offsetof(job_model, d_ff)},
    {"vocab_size", offsetof(job_model, vocab_size)}, {"seq_len", offsetof(job_model, seq_len)},
    {"image_size", offsetof(job_model, image_size)}, {"patch_size", offsetof(job_model, patch_size)},
    {"channels", offsetof(job_model, channels)},     {"n_classes", offsetof(job_model, n_classes)},
};
#define N_MODEL_INTS (int)(sizeof model_ints / sizeof model_ints[0])

char *ckpt_index_encode(const ckpt_meta *meta, const ckpt_file_sum *files)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char buf[64];
    int ok = cJSON_AddStringToObject(o, "format", CKPT_FORMAT_INDEX) &&
             cJSON_AddNumberToObject(o, "version", CKPT_VERSION) &&
             cJSON_AddNumberToObject(o, "step", (double)meta->step) &&
             cJSON_AddNumberToObject(o, "optim_step", (double)meta->optim_step);
    snprintf(buf, sizeof buf, "%llu", meta->seed);
    ok = ok && cJSON_AddStringToObject(o, "seed", buf);
    cJSON *lay = ok ? cJSON_AddObjectToObject(o, "layout") : NULL;
    ok = lay && cJSON_AddNumberToObject(lay, "dp", meta->dp) &&
         cJSON_AddNumberToObject(lay, "tp", meta->tp) && cJSON_AddNumberToObject(lay, "pp", meta->pp) &&
         cJSON_AddNumberToObject(lay, "world", meta->world) &&
         cJSON_AddNumberToObject(lay, "cp", meta->cp > 1 ? meta->cp : 1) &&
         cJSON_AddStringToObject(lay, "mode", meta->mode ? meta->mode : "ddp");
    if (ok && meta->model) {
        cJSON *m = cJSON_AddObjectToObject(o, "model");
        ok = m && cJSON_AddStringToObject(m, "kind", job_model_kind_name(meta->model->kind)) &&
             cJSON_AddStringToObject(m, "preset", meta->model->preset);
        for (int i = 0; ok && i < N_MODEL_INTS; i++)
            ok = cJSON_AddNumberToObject(m, model_ints[i].key,
                                         *(const int *)((const char *)meta->model + model_ints[i].off)) != NULL;
        /* the function the weights were trained for (model.activation, model.norm_eps) */
        ok = ok && cJSON_AddStringToObject(m, "activation", job_activation_name(meta->model->activation)) &&
             cJSON_AddNumberToObject(m, "norm_eps", job_model_norm_eps(meta->model));
        const job_model *md = meta->model;
        if (ok && md->kind == MODEL_LLAMA)
            ok = cJSON_AddNumberToObject(m, "n_kv_head", job_model_kv_heads(md)) &&
                 cJSON_AddNumberToObject(m, "rope_theta", job_model_rope_theta(md)) &&
                 cJSON_AddBoolToObject(m, "tie_embeddings", md->tie_embeddings) &&
                 cJSON_AddNumberToObject(m, "max_positions", job_model_max_positions(md));
        /* train.lora: the checkpoint holds the adapters only; the frozen base is
         * model.init_from's folder (or, without one, the seed's draw) */
        if (ok && job_lora_on(md)) {
            cJSON *l = cJSON_AddObjectToObject(m, "lora");
            ok = l && cJSON_AddNumberToObject(l, "rank", md->lora.rank) &&
                 cJSON_AddNumberToObject(l, "alpha", md->lora.alpha) &&
                 cJSON_AddNumberToObject(l, "dropout", md->lora.dropout) &&
                 cJSON_AddNumberToObject(l, "targets", md->lora.targets) &&
                 cJSON_AddStringToObject(m, "init_from", md->init_from);
        }
        if (ok && md->moe.experts > 0) ok = add_moe(m, &md->moe);
    }
    cJSON *loss = ok ? cJSON_AddArrayToObject(o, "loss_tail") : NULL;
    ok = loss != NULL;
    for (int i = 0; ok && i < meta->n_loss; i++)
        ok = cJSON_AddItemToArray(loss, cJSON_CreateNumber(meta->loss_tail[i]));
    cJSON *fl = ok ? cJSON_AddArrayToObject(o, "files") : NULL;
    ok = fl != NULL;
    for (int r = 0; ok && r < meta->world; r++) {
        cJSON *f = cJSON_CreateObject();
        ok = f && cJSON_AddItemToArray(fl, f);
        ckpt_rank_filename(buf, sizeof buf, r);
        ok = ok && cJSON_AddNumberToObject(f, "rank", r) && cJSON_AddStringToObject(f, "name", buf) &&
             cJSON_AddNumberToObject(f, "size", (double)files[r].size);
        snprintf(buf, sizeof buf, "%016" PRIx64, files[r].hash);
        ok = ok && cJSON_AddStringToObject(f, "xxh3", buf);
    }
    if (ok && meta->provenance) {
        cJSON *p = cJSON_Parse(meta->provenance);
        ok = p && cJSON_AddItemToObject(o, "provenance", p);
        if (!ok) cJSON_Delete(p);
    }
    ok = ok && cJSON_AddStringToObject(o, "job", meta->job_yaml ? meta->job_yaml : "");
    char *s = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* An integer JSON number in [lo, hi]. */
static int get_int(const cJSON *o, const char *key, double lo, double hi, long *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || d != floor(d)) return 0;
    *out = (long)d;
    return 1;
}

static int parse_u64(const char *s, int base, uint64_t *out)
{
    if (!s || !*s || strlen(s) > 20) return 0;
    char *end;
    unsigned long long v = strtoull(s, &end, base);
    if (*end || *s == '-' || *s == '+' || *s == ' ') return 0;
    *out = v;
    return 1;
}

int ckpt_index_decode(const char *text, size_t len, const char *path, ckpt_index *ix, char *err,
                      size_t errlen)
{
    memset(ix, 0, sizeof *ix);
    cJSON *o = cJSON_ParseWithLength(text, len);
    int rc = -1;
    long v;
    if (!cJSON_IsObject(o)) {
        st_fail(err, errlen, "%s: not a JSON object (corrupt index)", path);
        goto out;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CKPT_FORMAT_INDEX) != 0) {
        st_fail(err, errlen, "%s: not a dtrun checkpoint index (format is not \"%s\")", path, CKPT_FORMAT_INDEX);
        goto out;
    }
    if (!get_int(o, "version", 1, 1e6, &v) || v != CKPT_VERSION) {
        st_fail(err, errlen, "%s: unsupported version (this dtrun reads version %d)", path, CKPT_VERSION);
        goto out;
    }
    ckpt_info *in = &ix->info;
    if (!get_int(o, "step", 0, 1e15, &in->step)) {
        st_fail(err, errlen, "%s: bad or missing 'step'", path);
        goto out;
    }
    /* optional: an index without it applied an update at every step */
    in->optim_step = in->step;
    if (cJSON_GetObjectItemCaseSensitive(o, "optim_step") &&
        !get_int(o, "optim_step", 0, (double)in->step, &in->optim_step)) {
        st_fail(err, errlen, "%s: bad 'optim_step' (0 to step)", path);
        goto out;
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(o, "seed");
    uint64_t s64;
    if (!cJSON_IsString(seed) || !parse_u64(seed->valuestring, 10, &s64)) {
        st_fail(err, errlen, "%s: bad or missing 'seed' (a decimal string)", path);
        goto out;
    }
    in->seed = s64;
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(o, "layout");
    long dp, tp, pp, world;
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(lay, "mode");
    if (!cJSON_IsObject(lay) || !get_int(lay, "dp", 1, CKPT_MAX_WORLD, &dp) ||
        !get_int(lay, "tp", 1, CKPT_MAX_WORLD, &tp) || !get_int(lay, "pp", 1, CKPT_MAX_WORLD, &pp) ||
        !get_int(lay, "world", 1, CKPT_MAX_WORLD, &world) || !cJSON_IsString(mode) ||
        strlen(mode->valuestring) >= sizeof in->mode) {
        st_fail(err, errlen, "%s: bad or missing 'layout' (dp, tp, pp, world, mode)", path);
        goto out;
    }
    in->dp = (int)dp;
    in->tp = (int)tp;
    in->pp = (int)pp;
    in->world = (int)world;
    long cp = 1;
    if (cJSON_GetObjectItemCaseSensitive(lay, "cp") && !get_int(lay, "cp", 1, CKPT_MAX_WORLD, &cp)) {
        st_fail(err, errlen, "%s: bad 'layout.cp' (an integer >= 1)", path);
        goto out;
    }
    in->cp = (int)cp;
    /* plain data parallel was recorded as "none" before it was called "ddp" */
    snprintf(in->mode, sizeof in->mode, "%s", strcmp(mode->valuestring, "none") ? mode->valuestring : "ddp");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (m) {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(m, "kind");
        const cJSON *preset = cJSON_GetObjectItemCaseSensitive(m, "preset");
        int k = -1;
        for (int i = 0; cJSON_IsString(kind) && i <= MODEL_LLAMA; i++)
            if (!strcmp(kind->valuestring, job_model_kind_name((model_kind)i))) k = i;
        if (k < 0 || !cJSON_IsString(preset) || strlen(preset->valuestring) >= sizeof in->model.preset) {
            st_fail(err, errlen, "%s: bad 'model' (kind gpt, vit or llama, preset)", path);
            goto out;
        }
        in->model.kind = (model_kind)k;
        snprintf(in->model.preset, sizeof in->model.preset, "%s", preset->valuestring);
        for (int i = 0; i < N_MODEL_INTS; i++) {
            if (!get_int(m, model_ints[i].key, 0, 1e9, &v)) {
                st_fail(err, errlen, "%s: bad 'model.%s'", path, model_ints[i].key);
                goto out;
            }
            *(int *)((char *)&in->model + model_ints[i].off) = (int)v;
        }
        /* absent in checkpoints written before these keys: GPT-2's choices */
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(m, "activation");
        const cJSON *eps = cJSON_GetObjectItemCaseSensitive(m, "norm_eps");
        in->model.activation = ACT_GELU_TANH;
        in->model.norm_eps = JOB_NORM_EPS_DEFAULT;
        if (act && (!cJSON_IsString(act) || (strcmp(act->valuestring, "gelu_tanh") && strcmp(act->valuestring, "gelu")))) {
            st_fail(err, errlen, "%s: bad 'model.activation' (gelu_tanh or gelu)", path);
            goto out;
        }
        if (act && !strcmp(act->valuestring, "gelu")) in->model.activation = ACT_GELU;
        if (eps && !(cJSON_IsNumber(eps) && eps->valuedouble > 0 && eps->valuedouble <= 1)) {
            st_fail(err, errlen, "%s: bad 'model.norm_eps' (a number in (0, 1])", path);
            goto out;
        }
        if (eps) in->model.norm_eps = eps->valuedouble;
        if (in->model.kind == MODEL_LLAMA) {
            long kv, maxpos;
            const cJSON *theta = cJSON_GetObjectItemCaseSensitive(m, "rope_theta");
            const cJSON *tie = cJSON_GetObjectItemCaseSensitive(m, "tie_embeddings");
            if (!get_int(m, "n_kv_head", 1, 1e9, &kv) || !get_int(m, "max_positions", 1, 1e9, &maxpos) ||
                !cJSON_IsNumber(theta) || !(theta->valuedouble >= 1) || !cJSON_IsBool(tie)) {
                st_fail(err, errlen, "%s: bad llama 'model' (n_kv_head, rope_theta, tie_embeddings, max_positions)",
                        path);
                goto out;
            }
            in->model.n_kv_head = (int)kv;
            in->model.max_positions = (int)maxpos;
            in->model.rope_theta = theta->valuedouble;
            in->model.tie_embeddings = cJSON_IsTrue(tie);
        }
        const cJSON *lora = cJSON_GetObjectItemCaseSensitive(m, "lora");
        if (lora) {
            long r, tg;
            const cJSON *al = cJSON_GetObjectItemCaseSensitive(lora, "alpha");
            const cJSON *dr = cJSON_GetObjectItemCaseSensitive(lora, "dropout");
            const cJSON *base = cJSON_GetObjectItemCaseSensitive(m, "init_from");
            if (!get_int(lora, "rank", 1, 65536, &r) || !get_int(lora, "targets", 1, (1 << LORA_N_TARGETS) - 1, &tg) ||
                !cJSON_IsNumber(al) || !(al->valuedouble > 0) || !cJSON_IsNumber(dr) || !(dr->valuedouble >= 0) ||
                !(dr->valuedouble < 1) || !cJSON_IsString(base) || strlen(base->valuestring) >= JOB_PATH_MAX) {
                st_fail(err, errlen, "%s: bad 'model.lora' (rank, alpha, dropout, targets) or 'model.init_from'", path);
                goto out;
            }
            in->model.lora.rank = (int)r;
            in->model.lora.targets = (int)tg;
            in->model.lora.alpha = al->valuedouble;
            in->model.lora.dropout = dr->valuedouble;
            snprintf(in->model.init_from, sizeof in->model.init_from, "%s", base->valuestring);
        }
        const cJSON *moe = cJSON_GetObjectItemCaseSensitive(m, "moe");
        if (moe && read_moe(moe, &in->model.moe) != 0) {
            st_fail(err, errlen, "%s: bad 'model.moe' (experts, top_k, d_ff_expert, shared_experts, every, "
                                 "first_dense, router, norm_top_k, aux_loss_coef, bias_update_rate, capacity_factor)",
                    path);
            goto out;
        }
        in->has_model = 1;
    }
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(o, "loss_tail");
    if (!cJSON_IsArray(loss)) {
        st_fail(err, errlen, "%s: bad or missing 'loss_tail'", path);
        goto out;
    }
    int nl = cJSON_GetArraySize(loss);
    ix->loss = calloc((size_t)nl + 1, sizeof(double));
    if (!ix->loss) {
        st_fail(err, errlen, "%s: out of memory", path);
        goto out;
    }
    for (const cJSON *c = loss->child; c; c = c->next)
        /* a NaN loss was printed as null: keep it a NaN */
        ix->loss[in->n_loss++] = cJSON_IsNumber(c) ? c->valuedouble : NAN;
    in->loss_tail = ix->loss;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(o, "files");
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) != in->world) {
        st_fail(err, errlen, "%s: 'files' does not list the %d rank files of the layout", path, in->world);
        goto out;
    }
    ix->files = calloc((size_t)in->world, sizeof *ix->files);
    if (!ix->files) {
        st_fail(err, errlen, "%s: out of memory", path);
        goto out;
    }
    int r = 0;
    for (const cJSON *f = files->child; f; f = f->next, r++) {
        char want[64];
        ckpt_rank_filename(want, sizeof want, r);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *hash = cJSON_GetObjectItemCaseSensitive(f, "xxh3");
        long rank, size;
        /* the name is rebuilt from the rank, never taken from the file: an index
         * must not point a reader at ../../anything */
        if (!get_int(f, "rank", 0, CKPT_MAX_WORLD, &rank) || rank != r || !cJSON_IsString(name) ||
            strcmp(name->valuestring, want) != 0 || !get_int(f, "size", 8, 9007199254740992.0, &size) ||
            !cJSON_IsString(hash) || strlen(hash->valuestring) != 16 ||
            !parse_u64(hash->valuestring, 16, &ix->files[r].hash)) {
            st_fail(err, errlen, "%s: files[%d] is not {rank: %d, name: \"%s\", size, xxh3}", path, r, r, want);
            goto out;
        }
        ix->files[r].size = (uint64_t)size;
    }
    const cJSON *job = cJSON_GetObjectItemCaseSensitive(o, "job");
    ix->job = strdup(cJSON_IsString(job) ? job->valuestring : "");
    if (!ix->job) {
        st_fail(err, errlen, "%s: out of memory", path);
        goto out;
    }
    in->job_yaml = ix->job;
    /* optional: checkpoints before provenance have none */
    const cJSON *prov = cJSON_GetObjectItemCaseSensitive(o, "provenance");
    ix->provenance = cJSON_IsObject(prov) ? cJSON_PrintUnformatted(prov) : strdup("");
    if (!ix->provenance) {
        st_fail(err, errlen, "%s: out of memory", path);
        goto out;
    }
    in->provenance = ix->provenance;
    rc = 0;
out:
    cJSON_Delete(o);
    if (rc != 0) ckpt_index_free(ix);
    return rc;
}

void ckpt_index_free(ckpt_index *ix)
{
    free(ix->job);
    free(ix->provenance);
    free(ix->loss);
    free(ix->files);
    memset(ix, 0, sizeof *ix);
}
