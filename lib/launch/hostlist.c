/* hostlist.c — Slurm host list expansion ("n[1-3,5],gpu[001-002]-ib").
 *
 * Hand-written because Debian has no library for it outside Slurm itself, and
 * dtrun must not depend on `scontrol show hostnames` being installed on compute
 * nodes. Each entry is parsed into segments (literal text or a bracket group of
 * ranges), its host count is checked against the limit before anything is
 * expanded, then the groups are enumerated like an odometer (last group fastest). */
#include "lib/launch/hostlist.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/grow.h"

/* All names live in one buffer (NUL-separated) found by offset: a 65536-host
 * list is then two allocations, not 65536. */
struct hostlist {
    char *buf;
    size_t len, bufcap;
    size_t *off;
    int n, cap;
};

typedef struct {
    unsigned long lo, hi;
    int width;            /* digits of lo as written: zero padding */
} hl_range;

typedef struct {
    const char *lit;      /* literal text (not NUL-terminated), or NULL for a group */
    size_t litlen;
    hl_range *ranges;
    int nranges;
    unsigned long count;  /* hosts this segment yields (1 for a literal) */
    int maxlen;           /* longest text it yields */
} hl_seg;

typedef struct {
    const char *spec;
    char *err;
    size_t errlen;
} hl_ctx;

#define HL_MAX_DIGITS 9   /* keeps every value and product inside unsigned long */

static int hl_fail(hl_ctx *c, size_t pos, const char *fmt, ...)
{
    if (!c->err || !c->errlen) return -1;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "hostlist '%.200s%s' at column %zu: %s", c->spec,
             strlen(c->spec) > 200 ? "…" : "", pos + 1, why);
    return -1;
}

static int is_host_char(char ch)
{
    return isalnum((unsigned char)ch) || ch == '-' || ch == '.' || ch == '_';
}

static void segs_free(hl_seg *segs, int n)
{
    for (int k = 0; k < n; k++) free(segs[k].ranges);
    free(segs);
}

static int parse_number(hl_ctx *c, size_t open, size_t *pos, unsigned long *val, int *width)
{
    const char *s = c->spec;
    size_t start = *pos;
    if (!isdigit((unsigned char)s[*pos])) {
        if (s[*pos] == '\0') return hl_fail(c, open, "unclosed '['");
        return hl_fail(c, *pos, "expected a number, found '%c'", s[*pos]);
    }
    unsigned long v = 0;
    while (isdigit((unsigned char)s[*pos])) {
        if (*pos - start >= HL_MAX_DIGITS) return hl_fail(c, start, "number longer than %d digits", HL_MAX_DIGITS);
        v = v * 10 + (unsigned long)(s[*pos] - '0');
        (*pos)++;
    }
    *val = v;
    *width = (int)(*pos - start);
    return 0;
}

/* Parses "[a-b,c,…]" starting at the '['; fills seg. */
static int parse_group(hl_ctx *c, size_t *pos, hl_seg *seg)
{
    const char *s = c->spec;
    size_t open = (*pos)++;
    int cap = 0;
    seg->count = 0;
    seg->maxlen = 0;
    for (;;) {
        size_t at = *pos;
        hl_range r;
        if (parse_number(c, open, pos, &r.lo, &r.width) != 0) return -1;
        r.hi = r.lo;
        if (s[*pos] == '-') {
            (*pos)++;
            int w2;
            if (parse_number(c, open, pos, &r.hi, &w2) != 0) return -1;
            if (r.hi < r.lo) return hl_fail(c, at, "reversed range %lu-%lu", r.lo, r.hi);
            int hw = w2 > r.width ? w2 : r.width;
            if (hw > seg->maxlen) seg->maxlen = hw;
        }
        if (r.width > seg->maxlen) seg->maxlen = r.width;
        if (seg->nranges == cap) {
            cap = cap ? cap * 2 : 4;
            hl_range *p = realloc(seg->ranges, (size_t)cap * sizeof *p);
            if (!p) return hl_fail(c, at, "out of memory");
            seg->ranges = p;
        }
        seg->ranges[seg->nranges++] = r;
        seg->count += r.hi - r.lo + 1;
        if (seg->count > HOSTLIST_MAX_HOSTS)
            return hl_fail(c, open, "expands to more than %d hosts", HOSTLIST_MAX_HOSTS);
        if (s[*pos] == ',') { (*pos)++; continue; }
        if (s[*pos] == ']') { (*pos)++; return 0; }
        if (s[*pos] == '\0') return hl_fail(c, open, "unclosed '['");
        if (s[*pos] == '[') return hl_fail(c, *pos, "nested '['");
        return hl_fail(c, *pos, "unexpected '%c' in brackets", s[*pos]);
    }
}

/* Parses one entry (up to a top-level ',' or the end) into segments. */
static int parse_entry(hl_ctx *c, size_t *pos, hl_seg **out, int *nout, unsigned long *count)
{
    const char *s = c->spec;
    size_t start = *pos;
    hl_seg *segs = NULL;
    int n = 0, cap = 0;
    unsigned long total = 1;
    size_t maxlen = 0;
    while (s[*pos] && s[*pos] != ',') {
        if (n == cap) {
            cap = cap ? cap * 2 : 4;
            hl_seg *p = realloc(segs, (size_t)cap * sizeof *p);
            if (!p) { segs_free(segs, n); return hl_fail(c, *pos, "out of memory"); }
            segs = p;
        }
        hl_seg *seg = &segs[n];
        memset(seg, 0, sizeof *seg);
        n++;
        if (s[*pos] == '[') {
            if (parse_group(c, pos, seg) != 0) { segs_free(segs, n); return -1; }
        } else if (s[*pos] == ']') {
            segs_free(segs, n);
            return hl_fail(c, *pos, "unbalanced ']'");
        } else {
            size_t b = *pos;
            while (s[*pos] && s[*pos] != ',' && s[*pos] != '[' && s[*pos] != ']') {
                if (!is_host_char(s[*pos])) {
                    segs_free(segs, n);
                    if (isprint((unsigned char)s[*pos]))
                        return hl_fail(c, *pos, "character '%c' is not allowed in a host name", s[*pos]);
                    return hl_fail(c, *pos, "byte 0x%02x is not allowed in a host name", (unsigned char)s[*pos]);
                }
                (*pos)++;
            }
            seg->lit = s + b;
            seg->litlen = *pos - b;
            seg->count = 1;
            seg->maxlen = (int)seg->litlen;
        }
        maxlen += (size_t)seg->maxlen;
        if (maxlen > HOSTLIST_MAX_NAME) {
            segs_free(segs, n);
            return hl_fail(c, start, "host name longer than %d characters", HOSTLIST_MAX_NAME);
        }
        total *= seg->count; /* both <= HOSTLIST_MAX_HOSTS: no overflow */
        if (total > HOSTLIST_MAX_HOSTS) {
            segs_free(segs, n);
            return hl_fail(c, start, "expands to more than %d hosts", HOSTLIST_MAX_HOSTS);
        }
    }
    if (n == 0) {
        free(segs);
        return hl_fail(c, *pos, "empty host name");
    }
    *out = segs;
    *nout = n;
    *count = total;
    return 0;
}

/* Writes the host selected by idx[] (one range position per group). */
static void render(const hl_seg *segs, int n, const unsigned long *idx, char *out)
{
    char *p = out;
    for (int k = 0; k < n; k++) {
        const hl_seg *sg = &segs[k];
        if (sg->lit) {
            memcpy(p, sg->lit, sg->litlen);
            p += sg->litlen;
            continue;
        }
        unsigned long i = idx[k];
        for (int r = 0; r < sg->nranges; r++) {
            unsigned long span = sg->ranges[r].hi - sg->ranges[r].lo + 1;
            if (i < span) {
                p += sprintf(p, "%0*lu", sg->ranges[r].width, sg->ranges[r].lo + i);
                break;
            }
            i -= span;
        }
    }
    *p = '\0';
}

static int hl_push(hostlist *hl, const char *name)
{
    size_t len = strlen(name) + 1;
    if (hl->n == hl->cap) {
        int cap = hl->cap ? hl->cap * 2 : 16;
        size_t *p = realloc(hl->off, (size_t)cap * sizeof *p);
        if (!p) return -1;
        hl->off = p;
        hl->cap = cap;
    }
    if (grow_bytes(&hl->buf, &hl->bufcap, hl->len, len, 256)) return -1;
    memcpy(hl->buf + hl->len, name, len);
    hl->off[hl->n++] = hl->len;
    hl->len += len;
    return 0;
}

/* Walks the whole spec; with hl, appends every host; with first, copies the
 * first host. Returns the total count, or -1. */
static long hl_walk(hl_ctx *c, hostlist *hl, char *first, size_t firstlen)
{
    const char *s = c->spec;
    size_t pos = 0;
    unsigned long total = 0;
    if (!s[0]) return hl_fail(c, 0, "empty host list");
    for (;;) {
        hl_seg *segs = NULL;
        int n = 0;
        unsigned long count = 0;
        if (parse_entry(c, &pos, &segs, &n, &count) != 0) return -1;
        total += count;
        if (total > HOSTLIST_MAX_HOSTS) {
            segs_free(segs, n);
            return hl_fail(c, pos, "expands to more than %d hosts", HOSTLIST_MAX_HOSTS);
        }
        unsigned long idx[n];
        memset(idx, 0, sizeof idx);
        char name[HOSTLIST_MAX_NAME + 1];
        if (first && total == count) {
            render(segs, n, idx, name);
            if (strlen(name) >= firstlen) {
                segs_free(segs, n);
                return hl_fail(c, 0, "first host '%s' does not fit the buffer", name);
            }
            strcpy(first, name);
        }
        for (unsigned long h = 0; hl && h < count; h++) {
            render(segs, n, idx, name);
            if (hl_push(hl, name) != 0) {
                segs_free(segs, n);
                return hl_fail(c, pos, "out of memory");
            }
            for (int k = n - 1; k >= 0; k--) { /* odometer: last group fastest */
                if (segs[k].lit) continue;
                if (++idx[k] < segs[k].count) break;
                idx[k] = 0;
            }
        }
        segs_free(segs, n);
        if (!s[pos]) break;
        pos++; /* the ',' */
        if (!s[pos]) return hl_fail(c, pos, "empty host name after ','");
    }
    return (long)total;
}

hostlist *hostlist_parse(const char *spec, char *err, size_t errlen)
{
    hl_ctx c = { spec ? spec : "", err, errlen };
    hostlist *hl = calloc(1, sizeof *hl);
    if (!hl) { hl_fail(&c, 0, "out of memory"); return NULL; }
    if (hl_walk(&c, hl, NULL, 0) < 0) {
        hostlist_free(hl);
        return NULL;
    }
    return hl;
}

long hostlist_size(const char *spec, char *err, size_t errlen)
{
    hl_ctx c = { spec ? spec : "", err, errlen };
    return hl_walk(&c, NULL, NULL, 0);
}

int hostlist_first(const char *spec, char *out, size_t outlen, char *err, size_t errlen)
{
    hl_ctx c = { spec ? spec : "", err, errlen };
    return hl_walk(&c, NULL, out, outlen) < 0 ? -1 : 0;
}

int hostlist_count(const hostlist *hl) { return hl ? hl->n : 0; }

const char *hostlist_get(const hostlist *hl, int i)
{
    return hl && i >= 0 && i < hl->n ? hl->buf + hl->off[i] : NULL;
}

void hostlist_free(hostlist *hl)
{
    if (!hl) return;
    free(hl->buf);
    free(hl->off);
    free(hl);
}
