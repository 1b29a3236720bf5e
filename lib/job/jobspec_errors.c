/* jobspec_errors.c — the loader's one-line messages: "FILE:LINE:COL: what
 * (why)[; did you mean 'x'?]", or "FILE: override 'k=v': ..." for a --set, and
 * the suggestions for unknown sections and keys. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/job/jobspec_loader.h"
#include "lib/util/suggest.h"

/* Other tools' names for sections: only for "did you mean". */
static const char *const section_aliases[SEC_COUNT] = {
    "network,arch,architecture,net",
    "dataset,datasets,dataloader,input",
    "training,trainer,optim,optimizer,optimization,hyperparameters,hparams",
    "parallelism,distributed,dist,layout,sharding",
    "checkpointing,checkpoints,ckpt,save,saving",
    "logging,logs,metrics",
    "launcher,run,rendezvous,rdzv,torchrun",
};

/* Keys that other tools let you set but dtrun derives: say how instead. */
static const struct {
    job_section section;
    const char *key, *hint;
} derived_keys[] = {
    {SEC_TRAIN, "grad_accum", "it is derived as global_batch / (micro_batch x dp); set micro_batch instead"},
    {SEC_TRAIN, "gradient_accumulation_steps",
     "it is derived as global_batch / (micro_batch x dp); set micro_batch instead"},
    {SEC_PARALLEL, "world_size", "it is derived as dp x tp x pp"},
    {SEC_MODEL, "d_head", "it is derived as d_model / n_head"},
    {SEC_MODEL, "head_dim", "it is derived as d_model / n_head"},
};

/* ---------------------------------------------------------------- messages */

/* Copy user text into a message safely: no newlines or control bytes (the
 * error must stay one line), and long text is cut. */
const char *job_text_show(char *buf, size_t n, const char *s, size_t len)
{
    const size_t cut = 48;
    size_t o = 0;
    for (size_t i = 0; i < len && i < cut && o + 5 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    if (len > cut && o + 4 < n) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o < n ? o : n - 1] = 0;
    return buf;
}

static void vfail(loader *L, pos at, const char *override, const char *fmt, va_list ap)
{
    if (!L->errlen) return;
    char where[JOB_PATH_MAX + 160], quoted[256];
    if (override)
        snprintf(where, sizeof where, "%s: override '%s': ", L->name,
                 job_text_show(quoted, sizeof quoted, override, strlen(override)));
    else if (at.line > 0)
        snprintf(where, sizeof where, "%s:%d:%d: ", L->name, at.line, at.col);
    else
        snprintf(where, sizeof where, "%s: ", L->name);
    char what[768];
    vsnprintf(what, sizeof what, fmt, ap);
    snprintf(L->err, L->errlen, "%s%s", where, what);
}

int loader_fail_at(loader *L, pos at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(L, at, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

/* At a file position, or about a command-line override when `override` is set. */
int loader_fail_where(loader *L, pos at, const char *override, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(L, at, override, fmt, ap);
    va_end(ap);
    return -1;
}

/* About a key's value: points at the value (or names the override). */
int loader_fail_value(loader *L, int fid, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(L, L->e[fid].val_at, L->e[fid].override, fmt, ap);
    va_end(ap);
    return -1;
}

/* About a key itself (a key that does not belong): points at the key. */
int loader_fail_key(loader *L, int fid, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(L, L->e[fid].key_at, L->e[fid].override, fmt, ap);
    va_end(ap);
    return -1;
}

/* About a combination: points at the first blamed key the file gave; failing
 * that, at the preset that set a model shape, or at the section. */
int loader_fail_blame(loader *L, const int *blame, int n, const char *msg)
{
    for (int i = 0; i < n && blame[i] >= 0; i++)
        if (L->e[blame[i]].given) return loader_fail_key(L, blame[i], "%s", msg);
    for (int i = 0; i < n && blame[i] >= 0; i++)
        if (job_fields[blame[i]].section == SEC_MODEL && L->e[FID_MODEL_PRESET].given)
            return loader_fail_key(L, FID_MODEL_PRESET, "%s", msg);
    for (int i = 0; i < n && blame[i] >= 0; i++)
        if (L->section_given[job_fields[blame[i]].section])
            return loader_fail_at(L, L->section_at[job_fields[blame[i]].section], "%s", msg);
    return loader_fail_at(L, (pos){0, 0}, "%s", msg);
}

/* ------------------------------------------------------- unknown names */

int loader_unknown_key(loader *L, pos at, const char *override, job_section sec, const char *key, size_t len)
{
    char shown[256];
    job_text_show(shown, sizeof shown, key, len);
    const char *sname = job_section_names[sec];
    char msg[768];
    for (size_t i = 0; i < sizeof derived_keys / sizeof derived_keys[0]; i++)
        if (derived_keys[i].section == sec && strlen(derived_keys[i].key) == len &&
            !memcmp(derived_keys[i].key, key, len)) {
            snprintf(msg, sizeof msg, "unknown key '%s' in section '%s': %s", shown, sname, derived_keys[i].hint);
            goto out;
        }
    if (len == 2 && !memcmp(key, "<<", 2)) {
        snprintf(msg, sizeof msg, "merge keys ('<<') are not supported in section '%s'; write the keys out", sname);
        goto out;
    }

    suggest near;
    suggest_init(&near, key, len);
    for (int f = 0; f < FID_COUNT; f++)
        if (job_fields[f].section == sec) {
            suggest_offer(&near, job_fields[f].key, job_fields[f].key);
            suggest_offer_list(&near, job_fields[f].aliases, job_fields[f].key);
        }
    /* The exact key of another section beats a fuzzy match here: `train: {dp: 2}`
     * means parallel.dp, not a typo of some train key. */
    if (!suggest_best(&near) || near.best_distance > 0) {
        char others[256] = "";
        size_t used = 0;
        int found = 0;
        for (int f = 0; f < FID_COUNT; f++) {
            /* nested sections' keys (model.moe.every) are not what a top-level key meant */
            if (job_fields[f].section == sec || job_section_parent(job_fields[f].section) >= 0) continue;
            const char *k = job_fields[f].key;
            if (suggest_distance(key, len, k, strlen(k)) != 0) continue;
            int w = snprintf(others + used, sizeof others - used, "%s'%s.%s'", found ? " or " : "",
                             job_section_names[job_fields[f].section], k);
            if (w > 0 && (size_t)w < sizeof others - used) used += (size_t)w;
            found++;
        }
        if (found) {
            snprintf(msg, sizeof msg, "unknown key '%s' in section '%s'; did you mean %s?", shown, sname, others);
            goto out;
        }
    }
    if (suggest_best(&near)) {
        snprintf(msg, sizeof msg, "unknown key '%s' in section '%s'; did you mean '%s'?", shown, sname,
                 suggest_best(&near));
        goto out;
    }
    /* No close name: list the section's keys, the answer to "what then?". */
    size_t used = (size_t)snprintf(msg, sizeof msg, "unknown key '%s' in section '%s' (its keys:", shown, sname);
    for (int f = 0; f < FID_COUNT && used < sizeof msg; f++)
        if (job_fields[f].section == sec)
            used += (size_t)snprintf(msg + used, sizeof msg - used, " %s", job_fields[f].key);
    if (used < sizeof msg) snprintf(msg + used, sizeof msg - used, ")");
out:
    return loader_fail_where(L, at, override, "%s", msg);
}

int loader_unknown_section(loader *L, pos at, const char *override, const char *name, size_t len)
{
    char shown[256], msg[768];
    job_text_show(shown, sizeof shown, name, len);
    suggest near;
    suggest_init(&near, name, len);
    for (int s = 0; s < SEC_COUNT; s++) {
        if (job_section_parent(s) >= 0) continue; /* never at the top */
        suggest_offer(&near, job_section_names[s], job_section_names[s]);
        suggest_offer_list(&near, section_aliases[s], job_section_names[s]);
    }
    for (int s = 0; s < SEC_COUNT; s++)
        if (job_section_parent(s) >= 0 &&
            ((strlen(job_section_key(s)) == len && !memcmp(job_section_key(s), name, len)) ||
             (strlen(job_section_names[s]) == len && !memcmp(job_section_names[s], name, len)))) {
            const char *parent = job_section_names[job_section_parent(s)], *key = job_section_key(s);
            snprintf(msg, sizeof msg, "unknown section '%s': '%s' is a mapping inside section '%s' (%s: {%s: {...}})",
                     key, key, parent, parent, key);
            return loader_fail_where(L, at, override, "%s", msg);
        }
    int home = -1;
    for (int f = 0; f < FID_COUNT && home < 0; f++)
        if (suggest_distance(name, len, job_fields[f].key, strlen(job_fields[f].key)) == 0) home = f;
    if (suggest_best(&near))
        snprintf(msg, sizeof msg, "unknown section '%s'; did you mean '%s'?", shown, suggest_best(&near));
    else if (home >= 0)
        snprintf(msg, sizeof msg, "unknown section '%s': '%s' is a key of section '%s'; did you mean '%s.%s'?",
                 shown, job_fields[home].key, job_section_names[job_fields[home].section],
                 job_section_names[job_fields[home].section], job_fields[home].key);
    else
        snprintf(msg, sizeof msg,
                 "unknown section '%s' (the sections are model, data, train, parallel, checkpoint, log, launch)",
                 shown);
    return loader_fail_where(L, at, override, "%s", msg);
}

