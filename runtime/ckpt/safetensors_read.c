/* safetensors_read.c — the strict safetensors reader.
 *
 * A checkpoint may come from a crashed writer, a bad disk or an attacker, so the
 * file is validated completely before any tensor is handed out, in this order:
 *   1. at least 8 bytes; header length N <= 100 MB and <= file size - 8;
 *   2. the header: valid UTF-8, no raw control characters, no "\u0000" escape (a
 *      name would be cut short in C), a bounded number of JSON values (cJSON
 *      spends ~64 bytes per value: 100 MB of "0," must not cost gigabytes),
 *      starts with '{', one JSON object followed by nothing but whitespace;
 *   3. each entry: an object with exactly dtype (known), shape (integers, at most
 *      ST_MAX_DIMS) and data_offsets [begin, end], begin <= end <= data size,
 *      numel * dtype size == end - begin without overflow; names unique;
 *      "__metadata__" an object of strings;
 *   4. sorted by offset, the tensors tile the data region exactly: the first
 *      begins at 0, each begins where the previous ends (no overlap, no gap), the
 *      last ends at the end of the file (the format's rule; it also catches a
 *      truncated or extended file).
 * The first failure is the one message. */
#include "runtime/ckpt/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_JSON_VALUES 4000000
#define ST_MAX_EXACT ((uint64_t)1 << 53)

struct st_reader {
    char *path;
    void *map;          /* owned mapping (NULL for open_mem) */
    size_t map_len;
    st_tensor *t;       /* in offset order */
    int n;
    int *by_name;       /* indices into t sorted by name */
    char **meta_key, **meta_val;
    int n_meta;
};

/* Names in messages come from the file: show at most 80 bytes of them. */
#define SHOWN(s) 80, (s)

/* Step 2: returns NULL when the header text is acceptable, else why not. */
static const char *prescan_header(const unsigned char *h, size_t n, size_t *bad_at)
{
    size_t values = 0;
    int in_string = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = h[i];
        *bad_at = i;
        if (c < 0x80) {
            /* JSON allows tab, newline and return between tokens, none in strings */
            if (c < 0x20 && (in_string || (c != '\t' && c != '\n' && c != '\r')))
                return "control character in the header";
            if (in_string) {
                if (c == '\\') {
                    if (i + 1 < n && h[i + 1] == 'u' && i + 5 < n && memcmp(h + i + 2, "0000", 4) == 0)
                        return "\\u0000 in a string";
                    i += 2; /* the escaped character cannot end the string */
                    continue;
                }
                if (c == '"') in_string = 0;
            } else if (c == '"') {
                in_string = 1;
            } else if (c == ',' || c == '[' || c == '{' || c == ':') {
                if (++values > ST_MAX_JSON_VALUES) return "too many JSON values";
            }
            i++;
            continue;
        }
        /* UTF-8 multi-byte sequence: reject overlongs, surrogates, > U+10FFFF */
        size_t len;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
        else return "invalid UTF-8";
        if (i + len > n) return "invalid UTF-8";
        for (size_t k = 1; k < len; k++) {
            if ((h[i + k] & 0xC0) != 0x80) return "invalid UTF-8";
            cp = (cp << 6) | (h[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return "invalid UTF-8";
        i += len;
    }
    return NULL;
}

/* A JSON number that is an exact non-negative integer <= 2^53. */
static int json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > (double)ST_MAX_EXACT || d != (double)(uint64_t)d) return 0;
    *out = (uint64_t)d;
    return 1;
}

typedef struct {
    st_tensor t;
    uint64_t begin, end;
} entry;

static int cmp_entry(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_name(const void *a, const void *b, void *base)
{
    const st_tensor *t = base;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

static int cmp_str(const void *a, const void *b, void *base)
{
    char **s = base;
    return strcmp(s[*(const int *)a], s[*(const int *)b]);
}

static int parse_metadata(st_reader *r, const cJSON *m, char *err, size_t errlen)
{
    if (!cJSON_IsObject(m))
        return st_fail(err, errlen, "%s: __metadata__ is not an object (the format wants string keys and values)",
                       r->path);
    int n = cJSON_GetArraySize(m);
    r->meta_key = calloc((size_t)n + 1, sizeof(char *));
    r->meta_val = calloc((size_t)n + 1, sizeof(char *));
    if (!r->meta_key || !r->meta_val) return st_fail(err, errlen, "%s: out of memory", r->path);
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return st_fail(err, errlen, "%s: __metadata__ '%.*s' is not a string (the format wants string values)",
                           r->path, SHOWN(c->string));
        r->meta_key[r->n_meta] = strdup(c->string);
        r->meta_val[r->n_meta] = strdup(c->valuestring);
        r->n_meta++;
        if (!r->meta_key[r->n_meta - 1] || !r->meta_val[r->n_meta - 1])
            return st_fail(err, errlen, "%s: out of memory", r->path);
    }
    /* sorted by key, for lookups by name (a checkpoint shard has one key per tensor) */
    int *order = malloc(((size_t)r->n_meta + 1) * sizeof(int));
    char **k = malloc(((size_t)r->n_meta + 1) * sizeof(char *));
    char **v = malloc(((size_t)r->n_meta + 1) * sizeof(char *));
    if (!order || !k || !v) {
        free(order);
        free(k);
        free(v);
        return st_fail(err, errlen, "%s: out of memory", r->path);
    }
    for (int i = 0; i < r->n_meta; i++) order[i] = i;
    qsort_r(order, (size_t)r->n_meta, sizeof(int), cmp_str, r->meta_key);
    for (int i = 0; i < r->n_meta; i++) {
        k[i] = r->meta_key[order[i]];
        v[i] = r->meta_val[order[i]];
    }
    free(order);
    free(r->meta_key);
    free(r->meta_val);
    r->meta_key = k;
    r->meta_val = v;
    for (int i = 1; i < r->n_meta; i++)
        if (strcmp(k[i], k[i - 1]) == 0)
            return st_fail(err, errlen, "%s: __metadata__ key '%.*s' appears twice", r->path, SHOWN(k[i]));
    return 0;
}

/* Step 3 for one entry. */
static int parse_entry(st_reader *r, const cJSON *e, uint64_t data_len, entry *out, char *err,
                       size_t errlen)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return st_fail(err, errlen, "%s: tensor '%.*s' is not an object", r->path, SHOWN(name));
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *c = e->child; c; c = c->next) {
        const cJSON **slot = strcmp(c->string, "dtype") == 0         ? &dtype
                             : strcmp(c->string, "shape") == 0        ? &shape
                             : strcmp(c->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (!slot)
            return st_fail(err, errlen, "%s: tensor '%.*s': unknown field '%.*s' (expected dtype, shape, data_offsets)",
                           r->path, SHOWN(name), SHOWN(c->string));
        if (*slot)
            return st_fail(err, errlen, "%s: tensor '%.*s': field '%s' appears twice", r->path, SHOWN(name), c->string);
        *slot = c;
    }
    if (!dtype || !shape || !offs)
        return st_fail(err, errlen, "%s: tensor '%.*s': missing '%s'", r->path, SHOWN(name),
                       !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    int dt = cJSON_IsString(dtype) ? st_dtype_parse(dtype->valuestring) : -1;
    if (dt < 0)
        return st_fail(err, errlen, "%s: tensor '%.*s': unknown dtype '%.*s'", r->path, SHOWN(name),
                       SHOWN(cJSON_IsString(dtype) ? dtype->valuestring : "(not a string)"));
    if (!cJSON_IsArray(shape))
        return st_fail(err, errlen, "%s: tensor '%.*s': shape is not an array", r->path, SHOWN(name));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return st_fail(err, errlen, "%s: tensor '%.*s': %d dims (at most %d supported)", r->path, SHOWN(name), ndim,
                       ST_MAX_DIMS);
    st_tensor *t = &out->t;
    memset(out, 0, sizeof *out);
    t->name = name;
    t->dtype = (st_dtype)dt;
    t->ndim = ndim;
    uint64_t numel = 1;
    int d = 0;
    for (const cJSON *c = shape->child; c; c = c->next, d++) {
        uint64_t v;
        if (!json_uint(c, &v))
            return st_fail(err, errlen, "%s: tensor '%.*s': shape[%d] is not a non-negative integer",
                           r->path, SHOWN(name), d);
        if (__builtin_mul_overflow(numel, v, &numel))
            return st_fail(err, errlen, "%s: tensor '%.*s': shape overflows", r->path, SHOWN(name));
        t->shape[d] = (int64_t)v;
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)st_dtype_size(t->dtype), &bytes))
        return st_fail(err, errlen, "%s: tensor '%.*s': shape overflows", r->path, SHOWN(name));
    t->numel = numel;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &out->begin) ||
        !json_uint(offs->child->next, &out->end))
        return st_fail(err, errlen, "%s: tensor '%.*s': data_offsets is not [begin, end] of non-negative integers",
                       r->path, SHOWN(name));
    if (out->end < out->begin)
        return st_fail(err, errlen, "%s: tensor '%.*s': data_offsets [%llu, %llu] end before begin",
                       r->path, SHOWN(name), (unsigned long long)out->begin, (unsigned long long)out->end);
    if (out->end > data_len)
        return st_fail(err, errlen, "%s: tensor '%.*s': data_offsets [%llu, %llu] out of range (data is %llu bytes; truncated file?)",
                       r->path, SHOWN(name), (unsigned long long)out->begin, (unsigned long long)out->end,
                       (unsigned long long)data_len);
    if (out->end - out->begin != bytes)
        return st_fail(err, errlen, "%s: tensor '%.*s': shape and dtype %s need %llu bytes but data_offsets [%llu, %llu] hold %llu",
                       r->path, SHOWN(name), st_dtype_name(t->dtype), (unsigned long long)bytes,
                       (unsigned long long)out->begin, (unsigned long long)out->end,
                       (unsigned long long)(out->end - out->begin));
    return 0;
}

static int parse(st_reader *r, const unsigned char *buf, size_t len, char *err, size_t errlen)
{
    if (len < 8)
        return st_fail(err, errlen, "%s: truncated (%zu bytes; a safetensors file starts with an 8-byte header length)",
                       r->path, len);
    uint64_t n;
    memcpy(&n, buf, 8); /* little-endian host */
    if (n > ST_MAX_HEADER)
        return st_fail(err, errlen, "%s: header length %llu exceeds the 100 MB limit (corrupt or not a safetensors file)",
                       r->path, (unsigned long long)n);
    if (n > len - 8)
        return st_fail(err, errlen, "%s: header length %llu exceeds the file (%zu bytes; truncated?)", r->path,
                       (unsigned long long)n, len);
    if (n < 2 || buf[8] != '{')
        return st_fail(err, errlen, "%s: header does not start with '{' (not a safetensors file)", r->path);
    const unsigned char *h = buf + 8;
    size_t bad_at = 0;
    const char *why = prescan_header(h, (size_t)n, &bad_at);
    if (why) return st_fail(err, errlen, "%s: bad header at byte %zu (%s)", r->path, 8 + bad_at, why);

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)h, (size_t)n, &end, 0);
    if (!root) {
        size_t at = end && end >= (const char *)h ? (size_t)(end - (const char *)h) : 0;
        return st_fail(err, errlen, "%s: header is not valid JSON (near byte %zu)", r->path, 8 + at);
    }
    int rc = -1;
    entry *es = NULL;
    for (const char *p = end; p && p < (const char *)h + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st_fail(err, errlen, "%s: bad header at byte %zu (text after the JSON object)",
                    r->path, 8 + (size_t)(p - (const char *)h));
            goto out;
        }
    }
    if (!cJSON_IsObject(root)) {
        st_fail(err, errlen, "%s: header is not a JSON object", r->path);
        goto out;
    }
    uint64_t data_len = len - 8 - n;
    int count = cJSON_GetArraySize(root);
    es = calloc((size_t)count + 1, sizeof *es);
    if (!es) {
        st_fail(err, errlen, "%s: out of memory", r->path);
        goto out;
    }
    int ne = 0, seen_meta = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (seen_meta++) {
                st_fail(err, errlen, "%s: __metadata__ appears twice", r->path);
                goto out;
            }
            if (parse_metadata(r, c, err, errlen) != 0) goto out;
            continue;
        }
        if (parse_entry(r, c, data_len, &es[ne], err, errlen) != 0) goto out;
        ne++;
    }
    qsort(es, (size_t)ne, sizeof *es, cmp_entry);
    uint64_t at = 0;
    for (int i = 0; i < ne; i++) {
        if (es[i].begin < at) {
            st_fail(err, errlen, "%s: tensor '%.*s' data_offsets [%llu, %llu] overlap tensor '%.*s' [%llu, %llu]",
                    r->path, SHOWN(es[i].t.name), (unsigned long long)es[i].begin, (unsigned long long)es[i].end,
                    SHOWN(es[i - 1].t.name), (unsigned long long)es[i - 1].begin, (unsigned long long)es[i - 1].end);
            goto out;
        }
        if (es[i].begin > at) {
            st_fail(err, errlen, "%s: data bytes [%llu, %llu) belong to no tensor (before '%.*s'; the data must be fully covered)",
                    r->path, (unsigned long long)at, (unsigned long long)es[i].begin, SHOWN(es[i].t.name));
            goto out;
        }
        at = es[i].end;
    }
    if (at != data_len) {
        st_fail(err, errlen, "%s: %llu data bytes after the last tensor belong to no tensor (the data must be fully covered)",
                r->path, (unsigned long long)(data_len - at));
        goto out;
    }

    r->t = calloc((size_t)ne + 1, sizeof *r->t);
    r->by_name = calloc((size_t)ne + 1, sizeof *r->by_name);
    if (!r->t || !r->by_name) {
        st_fail(err, errlen, "%s: out of memory", r->path);
        goto out;
    }
    for (int i = 0; i < ne; i++) {
        r->t[i] = es[i].t;
        r->t[i].data = h + n + es[i].begin;
        r->t[i].nbytes = (size_t)(es[i].end - es[i].begin);
        r->t[i].name = strdup(es[i].t.name);
        r->by_name[i] = i;
        r->n = i + 1;
        if (!r->t[i].name) {
            st_fail(err, errlen, "%s: out of memory", r->path);
            goto out;
        }
    }
    qsort_r(r->by_name, (size_t)ne, sizeof(int), cmp_name, r->t);
    for (int i = 1; i < ne; i++) {
        if (strcmp(r->t[r->by_name[i]].name, r->t[r->by_name[i - 1]].name) == 0) {
            st_fail(err, errlen, "%s: tensor '%.*s' appears twice", r->path, SHOWN(r->t[r->by_name[i]].name));
            goto out;
        }
    }
    rc = 0;
out:
    free(es);
    cJSON_Delete(root);
    return rc;
}

static st_reader *reader_new(const char *name)
{
    st_reader *r = calloc(1, sizeof *r);
    if (r) r->path = strdup(name ? name : "(memory)");
    if (r && !r->path) {
        free(r);
        r = NULL;
    }
    return r;
}

int st_reader_open_mem(const void *buf, size_t len, const char *name, st_reader **out, char *err,
                       size_t errlen)
{
    *out = NULL;
    st_reader *r = reader_new(name);
    if (!r) return st_fail(err, errlen, "%s: out of memory", name);
    if (parse(r, buf, len, err, errlen) != 0) {
        st_reader_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

int st_reader_open(const char *path, st_reader **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_fail(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return st_fail(err, errlen, "%s: not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    if (len < 8) {
        close(fd);
        return st_fail(err, errlen, "%s: truncated (%zu bytes; a safetensors file starts with an 8-byte header length)",
                       path, len);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return st_fail(err, errlen, "%s: cannot map (%s)", path, strerror(errno));
    st_reader *r = reader_new(path);
    if (!r) {
        munmap(map, len);
        return st_fail(err, errlen, "%s: out of memory", path);
    }
    r->map = map;
    r->map_len = len;
    if (parse(r, map, len, err, errlen) != 0) {
        st_reader_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

void st_reader_close(st_reader *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) free((char *)r->t[i].name);
    for (int i = 0; i < r->n_meta; i++) {
        free(r->meta_key[i]);
        free(r->meta_val[i]);
    }
    free(r->meta_key);
    free(r->meta_val);
    free(r->t);
    free(r->by_name);
    if (r->map) munmap(r->map, r->map_len);
    free(r->path);
    free(r);
}

int st_reader_count(const st_reader *r) { return r->n; }

const st_tensor *st_reader_tensor(const st_reader *r, int i)
{
    return i >= 0 && i < r->n ? &r->t[i] : NULL;
}

const st_tensor *st_reader_find(const st_reader *r, const char *name)
{
    int lo = 0, hi = r->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(r->t[r->by_name[mid]].name, name);
        if (c == 0) return &r->t[r->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int st_reader_metadata_count(const st_reader *r) { return r->n_meta; }
const char *st_reader_metadata_key(const st_reader *r, int i)
{
    return i >= 0 && i < r->n_meta ? r->meta_key[i] : NULL;
}
const char *st_reader_metadata_value(const st_reader *r, int i)
{
    return i >= 0 && i < r->n_meta ? r->meta_val[i] : NULL;
}

const char *st_reader_metadata(const st_reader *r, const char *key)
{
    int lo = 0, hi = r->n_meta;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(r->meta_key[mid], key);
        if (c == 0) return r->meta_val[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *st_reader_path(const st_reader *r) { return r->path; }
