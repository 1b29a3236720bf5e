/* jobspec_values.c — one key's text into its field of job_spec, strictly:
 * integers are [+-]digits that fit, numbers are decimal and finite, booleans
 * true/false, enums one of their names, strings valid UTF-8 that fit. A wrong
 * value gets "section.key: expected ..., got ...", with a "did you mean" where
 * one is near. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/job/jobspec_loader.h"
#include "lib/util/suggest.h"
#include "lib/job/jobspec_utf8.h"

/* ------------------------------------------------------------- values */

static int text_is(const entry *e, const char *word)
{
    return e->len == strlen(word) && !memcmp(e->text, word, e->len);
}

int job_text_is_null(const char *s, size_t len)
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
    case FT_FLAGS: return "a list of names";
    case FT_KEYS: return "a list of job keys";
    default: return "a string";
    }
}

/* Text for "got ...": the value quoted, or what stood there instead. */
const char *job_entry_got(const entry *e, char *buf, size_t n)
{
    if (e->shape) return e->shape;
    if (e->is_null) return "an empty value";
    char shown[256];
    snprintf(buf, n, "'%s'", job_text_show(shown, sizeof shown, e->text, e->len));
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
    return loader_fail_value(L, fid, "%s %s, got %s", name, range, value);
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
        return loader_fail_value(L, fid, "%s: expected an integer or auto, got %s", name, job_entry_got(e, got, sizeof got));
    if (rc == -1) return loader_fail_value(L, fid, "%s: expected an integer, got %s", name, job_entry_got(e, got, sizeof got));
    long long max = f->type == FT_INT ? INT_MAX : LONG_MAX, min = f->type == FT_INT ? INT_MIN : LONG_MIN;
    if (rc == -2 || v > max || v < min)
        return loader_fail_value(L, fid, "%s: integer overflow: %s does not fit in %d bits", name,
                                 job_text_show(shown, sizeof shown, e->text, e->len), f->type == FT_INT ? 32 : 64);
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
        return loader_fail_value(L, fid, "%s: expected an integer, got %s", name, job_entry_got(e, got, sizeof got));
    if (e->text[0] == '-')
        return loader_fail_value(L, fid, "%s must be >= 0, got %s", name, job_text_show(shown, sizeof shown, e->text, e->len));
    char *copy = strndup(e->text, e->len);
    errno = 0;
    unsigned long long v = copy ? strtoull(copy, NULL, 10) : 0;
    int overflow = !copy || errno == ERANGE;
    free(copy);
    if (overflow)
        return loader_fail_value(L, fid, "%s: integer overflow: %s does not fit in 64 bits", name,
                                 job_text_show(shown, sizeof shown, e->text, e->len));
    *(unsigned long long *)job_field_ptr(L->job, fid) = v;
    return 0;
}

static int store_double(loader *L, int fid, const char *name)
{
    entry *e = &L->e[fid];
    char got[300], shown[256];
    double v = 0;
    int rc = parse_number(e, &v);
    if (rc == -1) return loader_fail_value(L, fid, "%s: expected a number, got %s", name, job_entry_got(e, got, sizeof got));
    if (rc == -3) return loader_fail_value(L, fid, "%s must be a finite number, got %s", name, job_entry_got(e, got, sizeof got));
    if (rc == -2) return loader_fail_value(L, fid, "%s: number out of range: %s", name,
                                           job_text_show(shown, sizeof shown, e->text, e->len));
    if (job_field_in_range(fid, v)) return out_of_range(L, fid, name, job_text_show(shown, sizeof shown, e->text, e->len));
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
        return loader_fail_value(L, fid, "%s: expected true or false, got %s; did you mean '%s'?", name,
                                 job_entry_got(e, got, sizeof got), suggest_best(&near));
    return loader_fail_value(L, fid, "%s: expected true or false, got %s", name, job_entry_got(e, got, sizeof got));
}

static int store_enum(loader *L, int fid, const char *name)
{
    const field_def *f = &job_fields[fid];
    entry *e = &L->e[fid];
    char got[300], list[128];
    job_field_enum_list(fid, list, sizeof list);
    if (e->shape || e->is_null)
        return loader_fail_value(L, fid, "%s: expected one of %s, got %s", name, list, job_entry_got(e, got, sizeof got));
    for (int i = 0; f->names[i]; i++)
        if (text_is(e, f->names[i])) {
            *(int *)job_field_ptr(L->job, fid) = i;
            return 0;
        }
    /* a value's former name is the value (parallel.mode none is ddp) */
    for (int i = 0; f->value_former && f->names[i]; i++)
        for (const char *p = f->value_former[i]; *p;) {
            size_t n = strcspn(p, ",");
            if (n == e->len && !strncmp(p, e->text, n)) {
                *(int *)job_field_ptr(L->job, fid) = i;
                return 0;
            }
            p += n + (p[n] == ',');
        }
    suggest near;
    suggest_init(&near, e->text, e->len);
    for (int i = 0; f->names[i]; i++) {
        suggest_offer(&near, f->names[i], f->names[i]);
        if (f->value_aliases) suggest_offer_list(&near, f->value_aliases[i], f->names[i]);
        if (f->value_former) suggest_offer_list(&near, f->value_former[i], f->names[i]);
    }
    if (suggest_best(&near))
        return loader_fail_value(L, fid, "%s: unknown value %s (expected %s); did you mean '%s'?", name,
                                 job_entry_got(e, got, sizeof got), list, suggest_best(&near));
    return loader_fail_value(L, fid, "%s: unknown value %s (expected %s)", name, job_entry_got(e, got, sizeof got), list);
}

/* A list of names (comma-separated; a YAML sequence arrives joined so) into a
 * bit set; empty or null: none. */
static int store_flags(loader *L, int fid, const char *name)
{
    const field_def *f = &job_fields[fid];
    entry *e = &L->e[fid];
    char got[300], list[128];
    job_field_enum_list(fid, list, sizeof list);
    int bits = 0;
    const char *s = e->is_null ? "" : e->text, *end = s + (e->is_null ? 0 : e->len);
    const char *a, *b;
    while (job_list_next(&s, end, &a, &b)) {
        entry one = {.text = a, .len = (size_t)(b - a)};
        int i = 0;
        while (f->names[i] && !text_is(&one, f->names[i])) i++;
        if (f->names[i]) {
            bits |= 1 << i;
            continue;
        }
        suggest near;
        suggest_init(&near, a, (size_t)(b - a));
        for (int k = 0; f->names[k]; k++) {
            suggest_offer(&near, f->names[k], f->names[k]);
            if (f->value_aliases) suggest_offer_list(&near, f->value_aliases[k], f->names[k]);
        }
        if (suggest_best(&near))
            return loader_fail_value(L, fid, "%s: unknown name %s (expected a list of %s); did you mean '%s'?", name,
                                     job_entry_got(&one, got, sizeof got), list, suggest_best(&near));
        return loader_fail_value(L, fid, "%s: unknown name %s (expected a list of %s)", name,
                                 job_entry_got(&one, got, sizeof got), list);
    }
    *(int *)job_field_ptr(L->job, fid) = bits;
    return 0;
}

static int store_string(loader *L, int fid, const char *name)
{
    const field_def *f = &job_fields[fid];
    entry *e = &L->e[fid];
    char got[300], why[128];
    const char *s = e->is_null && !e->override ? "" : e->text;
    size_t len = e->is_null && !e->override ? 0 : e->len;
    if (memchr(s, 0, len)) return loader_fail_value(L, fid, "%s: the value contains a NUL byte", name);
    if (!utf8_valid(s, len)) return loader_fail_value(L, fid, "%s: the value is not valid UTF-8", name);
    if (len >= f->size)
        return loader_fail_value(L, fid, "%s is too long (%zu bytes, at most %zu)", name, len, f->size - 1);
    char *dst = job_field_ptr(L->job, fid);
    memset(dst, 0, f->size); /* whole buffer, so equal jobs compare equal bytewise */
    memcpy(dst, s, len);
    if (job_field_check_string(fid, dst, why, sizeof why))
        return f->type == FT_KEYS ? loader_fail_value(L, fid, "%s: %s", name, why) /* why quotes the name */
                                  : loader_fail_value(L, fid, "%s: %s, got %s", name, why, job_entry_got(e, got, sizeof got));
    return 0;
}

int loader_store_value(loader *L, int fid)
{
    const field_def *f = &job_fields[fid];
    entry *e = &L->e[fid];
    char name[64], got[300];
    job_field_full_name(fid, name, sizeof name);
    if (e->shape)
        return loader_fail_value(L, fid, "%s: expected %s, got %s", name, want_of(f), job_entry_got(e, got, sizeof got));
    switch (f->type) {
    case FT_INT: case FT_LONG: return store_integer(L, fid, name);
    case FT_U64: return store_u64(L, fid, name);
    case FT_DOUBLE: return store_double(L, fid, name);
    case FT_BOOL: return store_bool(L, fid, name);
    case FT_ENUM: return store_enum(L, fid, name);
    case FT_FLAGS: return store_flags(L, fid, name);
    default: return store_string(L, fid, name);
    }
}

