/* jobspec.c — load a job file: YAML (libyaml's document API) -> job_spec.
 *
 * Three passes, so that the result does not depend on the order of keys:
 *  1. collect: walk the two levels (section -> key -> scalar), rejecting unknown
 *     names, duplicates and wrong shapes, and remember each key's value and the
 *     file positions of the key and of the value;
 *  2. resolve: defaults, then model.preset (or model.kind's tiny shape), then
 *     every other key in file order, each parsed strictly into its field;
 *  3. derive and check: d_ff, micro_batch, grad_accum, microbatches, min_lr ...
 *     then job_check(), whose complaint is pinned to the line of the key it
 *     blames.
 * Every failure is one line "FILE:LINE:COL: what (why)[; did you mean 'x'?]". */
#include "lib/job/jobspec.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "lib/job/jobspec_check.h"
#include "lib/job/jobspec_fields.h"
#include "lib/job/jobspec_presets.h"
#include "lib/job/jobspec_suggest.h"
#include "lib/job/jobspec_utf8.h"

/* A job file is a page of YAML; anything bigger is a mistake (a data file
 * passed by accident), refused before libyaml spends time on it. */
#define JOB_FILE_MAX (1 << 20)

/* Default synthetic data sizes: GPT in tokens, ViT in images. */
#define SYNTHETIC_GPT_TOKENS (1L << 20)
#define SYNTHETIC_VIT_IMAGES 4096L

typedef struct {
    int line, col; /* 1-based; line 0 = no position */
} pos;

/* One key's value as found in the file (or in an override). */
typedef struct {
    int given;
    pos key_at, val_at;
    const char *text;     /* scalar text, `len` bytes (may hold NULs) */
    size_t len;
    int is_null;          /* plain empty, ~ or null */
    const char *shape;    /* NULL for a scalar, else "a mapping" / "a sequence" */
    const char *override; /* the "section.key=value" it came from, or NULL */
} entry;

typedef struct {
    job_spec *job;
    const char *name;
    char *err;
    size_t errlen;
    entry e[FID_COUNT];
    int order[FID_COUNT]; /* given keys in file order, then overrides */
    int n_order;
    pos section_at[SEC_COUNT];
    int section_given[SEC_COUNT];
} loader;

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
static const char *show(char *buf, size_t n, const char *s, size_t len)
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
                 show(quoted, sizeof quoted, override, strlen(override)));
    else if (at.line > 0)
        snprintf(where, sizeof where, "%s:%d:%d: ", L->name, at.line, at.col);
    else
        snprintf(where, sizeof where, "%s: ", L->name);
    char what[768];
    vsnprintf(what, sizeof what, fmt, ap);
    snprintf(L->err, L->errlen, "%s%s", where, what);
}

__attribute__((format(printf, 3, 4))) static int fail_at(loader *L, pos at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(L, at, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

/* At a file position, or about a command-line override when `override` is set. */
__attribute__((format(printf, 4, 5))) static int fail_where(loader *L, pos at, const char *override,
                                                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(L, at, override, fmt, ap);
    va_end(ap);
    return -1;
}

/* About a key's value: points at the value (or names the override). */
__attribute__((format(printf, 3, 4))) static int fail_value(loader *L, int fid, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(L, L->e[fid].val_at, L->e[fid].override, fmt, ap);
    va_end(ap);
    return -1;
}

/* About a key itself (a key that does not belong): points at the key. */
__attribute__((format(printf, 3, 4))) static int fail_key(loader *L, int fid, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(L, L->e[fid].key_at, L->e[fid].override, fmt, ap);
    va_end(ap);
    return -1;
}

/* About a combination: points at the first blamed key the file gave; failing
 * that, at the preset that set a model shape, or at the section. */
static int fail_blame(loader *L, const int *blame, int n, const char *msg)
{
    for (int i = 0; i < n && blame[i] >= 0; i++)
        if (L->e[blame[i]].given) return fail_key(L, blame[i], "%s", msg);
    for (int i = 0; i < n && blame[i] >= 0; i++)
        if (job_fields[blame[i]].section == SEC_MODEL && L->e[FID_MODEL_PRESET].given)
            return fail_key(L, FID_MODEL_PRESET, "%s", msg);
    for (int i = 0; i < n && blame[i] >= 0; i++)
        if (L->section_given[job_fields[blame[i]].section])
            return fail_at(L, L->section_at[job_fields[blame[i]].section], "%s", msg);
    return fail_at(L, (pos){0, 0}, "%s", msg);
}

static void full_name(int fid, char *out, size_t n)
{
    snprintf(out, n, "%s.%s", job_section_names[job_fields[fid].section], job_fields[fid].key);
}

/* ------------------------------------------------------- unknown names */

static int unknown_key(loader *L, pos at, const char *override, job_section sec, const char *key, size_t len)
{
    char shown[256];
    show(shown, sizeof shown, key, len);
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
            if (job_fields[f].section == sec) continue;
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
    return fail_where(L, at, override, "%s", msg);
}

static int unknown_section(loader *L, pos at, const char *override, const char *name, size_t len)
{
    char shown[256], msg[768];
    show(shown, sizeof shown, name, len);
    suggest near;
    suggest_init(&near, name, len);
    for (int s = 0; s < SEC_COUNT; s++) {
        suggest_offer(&near, job_section_names[s], job_section_names[s]);
        suggest_offer_list(&near, section_aliases[s], job_section_names[s]);
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
    return fail_where(L, at, override, "%s", msg);
}

/* ------------------------------------------------------------- values */

static int text_is(const entry *e, const char *word)
{
    return e->len == strlen(word) && !memcmp(e->text, word, e->len);
}

static int is_null_text(const char *s, size_t len)
{
    return len == 0 || (len == 1 && s[0] == '~') ||
           (len == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

static const char *want_of(const field_def *f)
{
    switch (f->type) {
    case FT_INT: case FT_LONG: case FT_U64: return "an integer";
    case FT_DOUBLE: return "a number";
    case FT_BOOL: return "true or false";
    case FT_ENUM: return "a name";
    default: return "a string";
    }
}

/* Text for "got ...": the value quoted, or what stood there instead. */
static const char *got_of(const entry *e, char *buf, size_t n)
{
    if (e->shape) return e->shape;
    if (e->is_null) return "an empty value";
    char shown[256];
    snprintf(buf, n, "'%s'", show(shown, sizeof shown, e->text, e->len));
    return buf;
}

/* Whether text[0..len) is [+-]digits. */
static int is_integer_text(const char *text, size_t len)
{
    size_t i = len > 0 && (text[0] == '-' || text[0] == '+') ? 1 : 0;
    if (i == len) return 0;
    for (; i < len; i++)
        if (text[i] < '0' || text[i] > '9') return 0;
    return 1;
}

/* [+-]digits, nothing else. 0 ok, -1 not an integer, -2 overflows long long. */
static int parse_integer(const entry *e, long long *out)
{
    if (!is_integer_text(e->text, e->len)) return -1;
    char *copy = strndup(e->text, e->len); /* scalars need not end in NUL */
    if (!copy) return -2;
    errno = 0;
    long long v = strtoll(copy, NULL, 10);
    int rc = errno == ERANGE ? -2 : 0;
    free(copy);
    *out = v;
    return rc;
}

/* Whether text[0..len) is [+-] digits [. digits] [e [+-] digits], with at least
 * one digit before the exponent. */
static int is_number_text(const char *text, size_t len)
{
    size_t i = 0, digits = 0;
    if (i < len && (text[i] == '+' || text[i] == '-')) i++;
    while (i < len && text[i] >= '0' && text[i] <= '9') i++, digits++;
    if (i < len && text[i] == '.') {
        i++;
        while (i < len && text[i] >= '0' && text[i] <= '9') i++, digits++;
    }
    if (!digits) return 0;
    if (i < len && (text[i] == 'e' || text[i] == 'E')) {
        i++;
        if (i < len && (text[i] == '+' || text[i] == '-')) i++;
        if (!(i < len && text[i] >= '0' && text[i] <= '9')) return 0;
        while (i < len && text[i] >= '0' && text[i] <= '9') i++;
    }
    return i == len;
}

/* A decimal number. 0 ok, -1 not a number, -2 out of the double range,
 * -3 infinity or NaN spelled out. */
static int parse_number(const entry *e, double *out)
{
    static const char *const not_finite[] = {".inf", "inf", "infinity", ".nan", "nan"};
    const char *t = e->text;
    size_t len = e->len;
    if (len > 0 && (t[0] == '+' || t[0] == '-')) t++, len--;
    for (size_t i = 0; i < sizeof not_finite / sizeof not_finite[0]; i++)
        if (len == strlen(not_finite[i]) && !strncasecmp(t, not_finite[i], len)) return -3;
    if (!is_number_text(e->text, e->len)) return -1;
    char *copy = strndup(e->text, e->len);
    if (!copy) return -2;
    errno = 0;
    double v = strtod(copy, NULL);
    int rc = errno == ERANGE && isinf(v) ? -2 : 0;
    free(copy);
    *out = v; /* underflow to 0 or a denormal is fine: a range check follows */
    return rc;
}

static int out_of_range(loader *L, int fid, const char *name, const char *value)
{
    char range[96];
    job_field_range_text(fid, range, sizeof range);
    return fail_value(L, fid, "%s %s, got %s", name, range, value);
}

static int store_integer(loader *L, int fid, const char *name)
{
    const field_def *f = &job_fields[fid];
    entry *e = &L->e[fid];
    char got[300], shown[256];
    long long v = 0;
    if (fid == FID_DP) { /* dp: auto (jobspec.h) */
        L->job->parallel.dp_auto = e->len == 4 && !memcmp(e->text, "auto", 4);
        if (L->job->parallel.dp_auto) {
            L->job->parallel.dp = 1;
            return 0;
        }
    }
    int rc = parse_integer(e, &v);
    if (rc == -1 && fid == FID_DP)
        return fail_value(L, fid, "%s: expected an integer or auto, got %s", name, got_of(e, got, sizeof got));
    if (rc == -1) return fail_value(L, fid, "%s: expected an integer, got %s", name, got_of(e, got, sizeof got));
    long long max = f->type == FT_INT ? INT_MAX : LONG_MAX, min = f->type == FT_INT ? INT_MIN : LONG_MIN;
    if (rc == -2 || v > max || v < min)
        return fail_value(L, fid, "%s: integer overflow: %s does not fit in %d bits", name,
                          show(shown, sizeof shown, e->text, e->len), f->type == FT_INT ? 32 : 64);
    if (job_field_in_range(fid, (double)v)) {
        char value[32];
        snprintf(value, sizeof value, "%lld", v);
        return out_of_range(L, fid, name, value);
    }
    if (f->type == FT_INT) *(int *)job_field_ptr(L->job, fid) = (int)v;
    else *(long *)job_field_ptr(L->job, fid) = (long)v;
    return 0;
}

static int store_u64(loader *L, int fid, const char *name)
{
    entry *e = &L->e[fid];
    char got[300], shown[256];
    if (!is_integer_text(e->text, e->len))
        return fail_value(L, fid, "%s: expected an integer, got %s", name, got_of(e, got, sizeof got));
    if (e->text[0] == '-')
        return fail_value(L, fid, "%s must be >= 0, got %s", name, show(shown, sizeof shown, e->text, e->len));
    char *copy = strndup(e->text, e->len);
    errno = 0;
    unsigned long long v = copy ? strtoull(copy, NULL, 10) : 0;
    int overflow = !copy || errno == ERANGE;
    free(copy);
    if (overflow)
        return fail_value(L, fid, "%s: integer overflow: %s does not fit in 64 bits", name,
                          show(shown, sizeof shown, e->text, e->len));
    *(unsigned long long *)job_field_ptr(L->job, fid) = v;
    return 0;
}

static int store_double(loader *L, int fid, const char *name)
{
    entry *e = &L->e[fid];
    char got[300], shown[256];
    double v = 0;
    int rc = parse_number(e, &v);
    if (rc == -1) return fail_value(L, fid, "%s: expected a number, got %s", name, got_of(e, got, sizeof got));
    if (rc == -3) return fail_value(L, fid, "%s must be a finite number, got %s", name, got_of(e, got, sizeof got));
    if (rc == -2) return fail_value(L, fid, "%s: number out of range: %s", name,
                                    show(shown, sizeof shown, e->text, e->len));
    if (job_field_in_range(fid, v)) return out_of_range(L, fid, name, show(shown, sizeof shown, e->text, e->len));
    *(double *)job_field_ptr(L->job, fid) = v;
    return 0;
}

static int store_bool(loader *L, int fid, const char *name)
{
    entry *e = &L->e[fid];
    int *dst = job_field_ptr(L->job, fid);
    if (!e->shape && (text_is(e, "true") || text_is(e, "True") || text_is(e, "TRUE"))) {
        *dst = 1;
        return 0;
    }
    if (!e->shape && (text_is(e, "false") || text_is(e, "False") || text_is(e, "FALSE"))) {
        *dst = 0;
        return 0;
    }
    char got[300];
    suggest near;
    suggest_init(&near, e->shape ? "" : e->text, e->shape ? 0 : e->len);
    suggest_offer_list(&near, "true,yes,on,y,1,enabled,enable", "true");
    suggest_offer_list(&near, "false,no,off,n,0,disabled,disable", "false");
    if (suggest_best(&near))
        return fail_value(L, fid, "%s: expected true or false, got %s; did you mean '%s'?", name,
                          got_of(e, got, sizeof got), suggest_best(&near));
    return fail_value(L, fid, "%s: expected true or false, got %s", name, got_of(e, got, sizeof got));
}

static int store_enum(loader *L, int fid, const char *name)
{
    const field_def *f = &job_fields[fid];
    entry *e = &L->e[fid];
    char got[300], list[128];
    job_field_enum_list(fid, list, sizeof list);
    if (e->shape || e->is_null)
        return fail_value(L, fid, "%s: expected one of %s, got %s", name, list, got_of(e, got, sizeof got));
    for (int i = 0; f->names[i]; i++)
        if (text_is(e, f->names[i])) {
            *(int *)job_field_ptr(L->job, fid) = i;
            return 0;
        }
    suggest near;
    suggest_init(&near, e->text, e->len);
    for (int i = 0; f->names[i]; i++) {
        suggest_offer(&near, f->names[i], f->names[i]);
        if (f->value_aliases) suggest_offer_list(&near, f->value_aliases[i], f->names[i]);
    }
    if (suggest_best(&near))
        return fail_value(L, fid, "%s: unknown value %s (expected %s); did you mean '%s'?", name,
                          got_of(e, got, sizeof got), list, suggest_best(&near));
    return fail_value(L, fid, "%s: unknown value %s (expected %s)", name, got_of(e, got, sizeof got), list);
}

static int store_string(loader *L, int fid, const char *name)
{
    const field_def *f = &job_fields[fid];
    entry *e = &L->e[fid];
    char got[300], why[128];
    const char *s = e->is_null && !e->override ? "" : e->text;
    size_t len = e->is_null && !e->override ? 0 : e->len;
    if (memchr(s, 0, len)) return fail_value(L, fid, "%s: the value contains a NUL byte", name);
    if (!utf8_valid(s, len)) return fail_value(L, fid, "%s: the value is not valid UTF-8", name);
    if (len >= f->size)
        return fail_value(L, fid, "%s is too long (%zu bytes, at most %zu)", name, len, f->size - 1);
    char *dst = job_field_ptr(L->job, fid);
    memset(dst, 0, f->size); /* whole buffer, so equal jobs compare equal bytewise */
    memcpy(dst, s, len);
    if (job_field_check_string(fid, dst, why, sizeof why))
        return fail_value(L, fid, "%s: %s, got %s", name, why, got_of(e, got, sizeof got));
    return 0;
}

static int store_value(loader *L, int fid)
{
    const field_def *f = &job_fields[fid];
    entry *e = &L->e[fid];
    char name[64], got[300];
    full_name(fid, name, sizeof name);
    if (e->shape)
        return fail_value(L, fid, "%s: expected %s, got %s", name, want_of(f), got_of(e, got, sizeof got));
    switch (f->type) {
    case FT_INT: case FT_LONG: return store_integer(L, fid, name);
    case FT_U64: return store_u64(L, fid, name);
    case FT_DOUBLE: return store_double(L, fid, name);
    case FT_BOOL: return store_bool(L, fid, name);
    case FT_ENUM: return store_enum(L, fid, name);
    default: return store_string(L, fid, name);
    }
}

/* ----------------------------------------------------------- collecting */

static pos pos_of(const yaml_node_t *n)
{
    return (pos){(int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
}

static const char *shape_of(const yaml_node_t *n)
{
    if (n->type == YAML_MAPPING_NODE) return "a mapping";
    if (n->type == YAML_SEQUENCE_NODE) return "a sequence";
    return NULL;
}

static int is_null_node(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           is_null_text((const char *)n->data.scalar.value, n->data.scalar.length);
}

/* Only YAML's core tags (!!str, !!int ... and the defaults libyaml assigns);
 * others (!!python/object, !custom) ask for types dtrun does not have. */
static int check_tag(loader *L, const yaml_node_t *n)
{
    static const char *const core[] = {"str", "int", "float", "bool", "null", "map", "seq"};
    const char *tag = (const char *)n->tag;
    if (!tag) return 0;
    if (!strncmp(tag, "tag:yaml.org,2002:", 18))
        for (size_t i = 0; i < sizeof core / sizeof core[0]; i++)
            if (!strcmp(tag + 18, core[i])) return 0;
    char shown[256];
    return fail_at(L, pos_of(n), "unsupported YAML tag '%s'", show(shown, sizeof shown, tag, strlen(tag)));
}

static int record(loader *L, int fid, pos key_at, const yaml_node_t *v)
{
    entry *e = &L->e[fid];
    e->given = 1;
    e->key_at = key_at;
    e->val_at = pos_of(v);
    e->shape = shape_of(v);
    if (!e->shape) {
        e->text = (const char *)v->data.scalar.value;
        e->len = v->data.scalar.length;
        e->is_null = is_null_node(v);
    }
    L->order[L->n_order++] = fid;
    return 0;
}

static int collect_section(loader *L, yaml_document_t *doc, job_section sec, const yaml_node_t *map)
{
    const char *sname = job_section_names[sec];
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v) return fail_at(L, pos_of(map), "malformed mapping in section '%s'", sname);
        if (check_tag(L, k) || check_tag(L, v)) return -1;
        if (k->type != YAML_SCALAR_NODE)
            return fail_at(L, pos_of(k), "a key in section '%s' must be a name, got %s", sname, shape_of(k));
        const char *key = (const char *)k->data.scalar.value;
        size_t len = k->data.scalar.length;
        int fid = job_field_find(sec, key, len);
        if (fid < 0) return unknown_key(L, pos_of(k), NULL, sec, key, len);
        if (L->e[fid].given)
            return fail_at(L, pos_of(k), "duplicate key '%s' in section '%s' (first at line %d)", job_fields[fid].key,
                           sname, L->e[fid].key_at.line);
        record(L, fid, pos_of(k), v);
    }
    return 0;
}

static int collect(loader *L, yaml_document_t *doc)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root || is_null_node(root))
        return fail_at(L, (pos){1, 1},
                       "empty job file (expected a mapping of sections: model, data, train, parallel, "
                       "checkpoint, log, launch)");
    if (check_tag(L, root)) return -1;
    if (root->type != YAML_MAPPING_NODE) {
        char got[300];
        entry as_entry = {.shape = shape_of(root)};
        if (!as_entry.shape) {
            as_entry.text = (const char *)root->data.scalar.value;
            as_entry.len = root->data.scalar.length;
        }
        return fail_at(L, pos_of(root),
                       "the job file must be a mapping of sections (model, data, train, ...), got %s",
                       as_entry.shape ? as_entry.shape : got_of(&as_entry, got, sizeof got));
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v) return fail_at(L, pos_of(root), "malformed mapping at the top level");
        if (check_tag(L, k) || check_tag(L, v)) return -1;
        if (k->type != YAML_SCALAR_NODE)
            return fail_at(L, pos_of(k), "a section name must be a name, got %s", shape_of(k));
        const char *name = (const char *)k->data.scalar.value;
        size_t len = k->data.scalar.length;
        int sec = job_section_find(name, len);
        if (sec < 0) return unknown_section(L, pos_of(k), NULL, name, len);
        if (L->section_given[sec])
            return fail_at(L, pos_of(k), "duplicate section '%s' (first at line %d)", job_section_names[sec],
                           L->section_at[sec].line);
        L->section_given[sec] = 1;
        L->section_at[sec] = pos_of(k);
        if (is_null_node(v)) continue; /* "train:" with every key commented out */
        if (v->type != YAML_MAPPING_NODE) {
            char got[300];
            entry as_entry = {.shape = shape_of(v)};
            if (!as_entry.shape) {
                as_entry.text = (const char *)v->data.scalar.value;
                as_entry.len = v->data.scalar.length;
            }
            return fail_at(L, pos_of(v), "section '%s' must be a mapping of keys, got %s", job_section_names[sec],
                           as_entry.shape ? as_entry.shape : got_of(&as_entry, got, sizeof got));
        }
        if (collect_section(L, doc, (job_section)sec, v)) return -1;
    }
    return 0;
}

static int collect_overrides(loader *L, const char *const *overrides, int n)
{
    for (int i = 0; i < n; i++) {
        const char *o = overrides[i];
        if (!o) continue;
        const char *eq = strchr(o, '=');
        const char *dot = memchr(o, '.', eq ? (size_t)(eq - o) : strlen(o));
        if (!eq || !dot)
            return fail_where(L, (pos){0, 0}, o, "expected SECTION.KEY=VALUE (e.g. train.steps=100)");
        int sec = job_section_find(o, (size_t)(dot - o));
        if (sec < 0) return unknown_section(L, (pos){0, 0}, o, o, (size_t)(dot - o));
        const char *key = dot + 1;
        size_t klen = (size_t)(eq - key);
        int fid = job_field_find((job_section)sec, key, klen);
        if (fid < 0) return unknown_key(L, (pos){0, 0}, o, (job_section)sec, key, klen);
        entry *e = &L->e[fid];
        if (!e->given) L->order[L->n_order++] = fid;
        memset(e, 0, sizeof *e);
        e->given = 1;
        e->override = o;
        e->text = eq + 1;
        e->len = strlen(eq + 1);
        e->is_null = e->len == 0;
    }
    return 0;
}

/* ----------------------------------------------------------- resolving */

static int resolve_model_base(loader *L, int *preset_d_ff)
{
    job_spec *job = L->job;
    const job_preset *p = NULL;
    if (L->e[FID_MODEL_PRESET].given) {
        if (store_value(L, FID_MODEL_PRESET)) return -1;
        const char *name = job->model.preset;
        p = job_preset_find(name);
        if (!p) {
            char shown[256];
            show(shown, sizeof shown, name, strlen(name));
            suggest near;
            suggest_init(&near, name, strlen(name));
            for (int i = 0; job_preset_at(i); i++) suggest_offer(&near, job_preset_at(i)->name, job_preset_at(i)->name);
            if (suggest_best(&near))
                return fail_value(L, FID_MODEL_PRESET, "model.preset: unknown preset '%s'; did you mean '%s'?",
                                  shown, suggest_best(&near));
            char list[512];
            size_t used = 0;
            for (int i = 0; job_preset_at(i) && used < sizeof list; i++)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                                         job_preset_at(i)->name);
            return fail_value(L, FID_MODEL_PRESET, "model.preset: unknown preset '%s' (presets: %s)", shown, list);
        }
    }
    if (L->e[FID_MODEL_KIND].given) {
        if (store_value(L, FID_MODEL_KIND)) return -1;
        if (p && p->kind != job->model.kind)
            return fail_value(L, FID_MODEL_KIND, "model.kind is %s but preset '%s' is a %s model",
                              job_model_kind_name(job->model.kind), p->name, job_model_kind_name(p->kind));
    }
    if (!p) p = job_preset_tiny(job->model.kind);
    job_preset_apply(p, &job->model);
    *preset_d_ff = p->d_ff;
    return 0;
}

/* lr / 10, rounded to 15 significant digits: 6e-4 / 10 is 5.9999999999999995e-05
 * in binary, and --print-config should show the 6e-05 a person would write. */
static double tenth(double lr)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", lr / 10);
    return strtod(buf, NULL);
}

/* Values the file may leave out that follow from others. */
static int derive(loader *L, int preset_d_ff)
{
    job_spec *job = L->job;
    job_model *m = &job->model;
    job_train *t = &job->train;
    job_parallel *par = &job->parallel;
    char msg[512];

    if (!L->e[FID_D_FF].given) m->d_ff = preset_d_ff ? preset_d_ff : 4 * m->d_model;
    if (!L->e[FID_MIN_LR].given) t->min_lr = tenth(t->lr);
    if (!L->e[FID_SYNTHETIC_SIZE].given)
        job->data.synthetic_size = m->kind == MODEL_GPT ? SYNTHETIC_GPT_TOKENS : SYNTHETIC_VIT_IMAGES;
    if (!L->e[FID_VIRTUAL_STAGES].given) par->virtual_stages = par->pp_schedule == PP_INTERLEAVED ? 2 : 1;

    if (par->dp_auto && !L->e[FID_MICRO_BATCH].given)
        return fail_key(L, FID_DP, "parallel.dp: auto needs train.micro_batch (the samples per rank per micro-step): "
                                   "dp is known only when the workers start, and the global batch stays the same");
    if (par->dp_auto && L->e[FID_MICROBATCHES].given)
        return fail_key(L, FID_MICROBATCHES, "parallel.microbatches cannot be set with dp: auto (it is derived: "
                                             "global_batch / (micro_batch x dp) once dp is known)");
    if (!L->e[FID_MICRO_BATCH].given) {
        if (L->e[FID_MICROBATCHES].given) {
            long long per = (long long)par->dp * par->microbatches;
            if (t->global_batch % per) {
                snprintf(msg, sizeof msg,
                         "train.global_batch %d is not divisible by dp %d x microbatches %d, so micro_batch cannot "
                         "be derived",
                         t->global_batch, par->dp, par->microbatches);
                return fail_blame(L, (const int[]){FID_MICROBATCHES, FID_GLOBAL_BATCH, FID_DP}, 3, msg);
            }
            t->micro_batch = (int)(t->global_batch / per);
        } else {
            if (t->global_batch % par->dp) {
                snprintf(msg, sizeof msg,
                         "train.global_batch %d is not divisible by parallel.dp %d (each data-parallel rank takes an "
                         "equal share)",
                         t->global_batch, par->dp);
                return fail_blame(L, (const int[]){FID_DP, FID_GLOBAL_BATCH}, 2, msg);
            }
            t->micro_batch = t->global_batch / par->dp;
        }
    }
    long long per_step = (long long)t->micro_batch * par->dp;
    t->grad_accum = (int)(t->global_batch / per_step); /* job_check reports a remainder */
    if (!L->e[FID_MICROBATCHES].given) par->microbatches = t->grad_accum > 0 ? t->grad_accum : 1;
    return 0;
}

static int resolve(loader *L)
{
    job_spec *job = L->job;
    int preset_d_ff = 0;
    if (resolve_model_base(L, &preset_d_ff)) return -1;
    for (int i = 0; i < L->n_order; i++) {
        int fid = L->order[i];
        if (fid == FID_MODEL_PRESET || fid == FID_MODEL_KIND) continue;
        if (!job_field_applies(job, fid)) {
            char name[64];
            full_name(fid, name, sizeof name);
            return fail_key(L, fid, "%s applies to %s models only (this model is %s)", name,
                            job_model_kind_name(job->model.kind == MODEL_GPT ? MODEL_VIT : MODEL_GPT),
                            job_model_kind_name(job->model.kind));
        }
        if (store_value(L, fid)) return -1;
    }
    if (derive(L, preset_d_ff)) return -1;
    int blame[JOB_BLAME_MAX];
    char msg[512];
    if (job_check(job, blame, msg, sizeof msg)) return fail_blame(L, blame, JOB_BLAME_MAX, msg);
    return 0;
}

/* ------------------------------------------------------------- parsing */

/* libyaml's reader reports a byte offset, not a mark: count lines ourselves
 * (columns in characters, as libyaml's marks count them). */
static pos pos_of_offset(const char *text, size_t len, size_t offset)
{
    pos p = {1, 1};
    for (size_t i = 0; i < offset && i < len; i++) {
        if (text[i] == '\n') p.line++, p.col = 1;
        else if (((unsigned char)text[i] & 0xc0) != 0x80) p.col++;
    }
    return p;
}

static int syntax_error(loader *L, const yaml_parser_t *parser, const char *text, size_t len)
{
    const char *problem = parser->problem ? parser->problem : "malformed YAML";
    switch (parser->error) {
    case YAML_MEMORY_ERROR:
        return fail_at(L, (pos){0, 0}, "out of memory while parsing YAML");
    case YAML_READER_ERROR:
        if (parser->problem_value != -1)
            return fail_at(L, pos_of_offset(text, len, parser->problem_offset), "YAML error: %s (byte 0x%02x)",
                           problem, (unsigned)parser->problem_value & 0xffu);
        return fail_at(L, pos_of_offset(text, len, parser->problem_offset), "YAML error: %s", problem);
    default: {
        pos at = {(int)parser->problem_mark.line + 1, (int)parser->problem_mark.column + 1};
        size_t i = parser->problem_mark.index; /* libyaml counts characters; tabs are ASCII */
        if (parser->error == YAML_SCANNER_ERROR && i < len && text[i] == '\t' &&
            pos_of_offset(text, len, i).line == at.line)
            return fail_at(L, at, "YAML syntax error: a tab character; YAML indents with spaces only");
        if (parser->context)
            return fail_at(L, at, "YAML syntax error: %s (%s at line %d)", problem, parser->context,
                           (int)parser->context_mark.line + 1);
        return fail_at(L, at, "YAML syntax error: %s", problem);
    }
    }
}

static int load(loader *L, const char *text, size_t len, const char *const *overrides, int n_overrides)
{
    yaml_parser_t parser;
    yaml_document_t doc, next;
    if (!yaml_parser_initialize(&parser)) return fail_at(L, (pos){0, 0}, "cannot start the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        syntax_error(L, &parser, text, len);
        yaml_parser_delete(&parser);
        return -1;
    }
    int rc = 0;
    /* A second document would be silently ignored otherwise. */
    if (yaml_document_get_root_node(&doc)) {
        if (!yaml_parser_load(&parser, &next)) {
            rc = syntax_error(L, &parser, text, len);
        } else {
            yaml_node_t *extra = yaml_document_get_root_node(&next);
            if (extra)
                rc = fail_at(L, (pos){(int)next.start_mark.line + 1, (int)next.start_mark.column + 1},
                             "a second YAML document; a job file holds exactly one");
            yaml_document_delete(&next);
        }
    }
    if (rc == 0) rc = collect(L, &doc);
    if (rc == 0) rc = collect_overrides(L, overrides, n_overrides);
    if (rc == 0) rc = resolve(L); /* still reads scalars inside doc */
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

/* ------------------------------------------------------------- public */

/* The error must stay one line even when a file name holds a newline. */
static void one_line(char *err, size_t errlen)
{
    for (size_t i = 0; i < errlen && err[i]; i++)
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f) err[i] = '?';
}


void job_defaults(job_spec *job)
{
    memset(job, 0, sizeof *job);
    job_preset_apply(job_preset_find("gpt-tiny"), &job->model);

    job->data.kind = DATA_SYNTHETIC;
    job->data.val_fraction = 0.1;
    job->data.synthetic_size = SYNTHETIC_GPT_TOKENS;

    job_train *t = &job->train;
    t->steps = 20;
    t->global_batch = 8;
    t->micro_batch = 8;
    t->grad_accum = 1;
    t->lr = 1e-3;
    t->min_lr = tenth(t->lr);
    t->warmup = 0;
    t->schedule = LR_COSINE;
    t->weight_decay = 0.0;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->eps = 1e-8;
    t->grad_clip = 1.0;
    t->precision = PREC_FP32;
    t->device = DEVICE_AUTO;
    t->seed = 1337;
    t->recompute = RECOMPUTE_NONE;
    t->eval_every = 0;
    t->eval_batches = 4;
    t->threads = 0;
    t->skip_nonfinite = 0;

    job_parallel *p = &job->parallel;
    p->dp = p->tp = p->pp = 1;
    p->mode = SHARD_NONE;
    p->pp_schedule = PP_1F1B;
    p->microbatches = 1;
    p->virtual_stages = 1;
    p->sequence_parallel = 0;
    p->bucket_mb = 25;

    job->checkpoint.every = 0;
    job->checkpoint.keep = 2;
    memcpy(job->checkpoint.resume, "auto", 5);

    job->log.every = 1;
    job->log.progress = PROGRESS_AUTO;

    job->launch.max_restarts = -1;
}

int job_load_string_overrides(job_spec *job, const char *text, size_t len, const char *name,
                              const char *const *overrides, int n_overrides, char *err, size_t errlen)
{
    static loader zero;
    loader *L = malloc(sizeof *L); /* ~10 KiB: kept off small thread stacks */
    if (!L) {
        if (errlen) snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    *L = zero;
    L->job = job;
    L->name = name;
    L->err = err;
    L->errlen = errlen;
    if (errlen) err[0] = 0;
    job_defaults(job);
    size_t nlen = strlen(name);
    memcpy(job->path, name, nlen < JOB_PATH_MAX ? nlen : JOB_PATH_MAX - 1);
    int rc = 0;
    if (len > JOB_FILE_MAX)
        rc = fail_at(L, (pos){0, 0}, "too large for a job file (%zu bytes, at most %d)", len, JOB_FILE_MAX);
    else
        rc = load(L, text ? text : "", text ? len : 0, overrides, n_overrides);
    free(L);
    if (rc && errlen) one_line(err, errlen);
    return rc;
}

int job_load_string(job_spec *job, const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    return job_load_string_overrides(job, text, len, name, NULL, 0, err, errlen);
}

int job_load_file_overrides(job_spec *job, const char *path, const char *const *overrides, int n_overrides,
                            char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errlen) snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        if (errlen) one_line(err, errlen);
        return -1;
    }
    /* Read to EOF rather than trusting st_size, so pipes and /dev/stdin work. */
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int rc = 0;
    while (buf) {
        if (len == cap) {
            if (cap > JOB_FILE_MAX) break;
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (!buf) {
        if (errlen) snprintf(err, errlen, "%s: out of memory reading the job file", path);
        rc = -1;
    } else if (ferror(f)) {
        if (errlen) snprintf(err, errlen, "%s: cannot read (%s)", path, strerror(errno));
        rc = -1;
    } else if (len > JOB_FILE_MAX) {
        if (errlen) snprintf(err, errlen, "%s: too large for a job file (more than %d bytes)", path, JOB_FILE_MAX);
        rc = -1;
    }
    fclose(f);
    if (rc == 0) rc = job_load_string_overrides(job, buf, len, path, overrides, n_overrides, err, errlen);
    free(buf);
    if (rc && errlen) one_line(err, errlen);
    return rc;
}

int job_load_file(job_spec *job, const char *path, char *err, size_t errlen)
{
    return job_load_file_overrides(job, path, NULL, 0, err, errlen);
}

int job_resolve_world(job_spec *job, int world, char *err, size_t errlen)
{
    job_parallel *par = &job->parallel;
    job_train *t = &job->train;
    if (!par->dp_auto) return 0;
    int tp_pp = par->tp * par->pp;
    if (world < 1 || world % tp_pp) {
        snprintf(err, errlen, "%s: parallel.dp: auto: the world of %d workers is not a multiple of tp x pp = %d",
                 job->path, world, tp_pp);
        return -1;
    }
    par->dp = world / tp_pp;
    long long per_step = (long long)t->micro_batch * par->dp;
    if (t->global_batch % per_step) {
        snprintf(err, errlen, "%s: parallel.dp: auto: train.global_batch %d is not divisible by micro_batch %d x dp %d "
                              "(dp = %d workers / (tp x pp))",
                 job->path, t->global_batch, t->micro_batch, par->dp, world);
        return -1;
    }
    t->grad_accum = (int)(t->global_batch / per_step);
    par->microbatches = t->grad_accum;
    return job_validate(job, err, errlen);
}
