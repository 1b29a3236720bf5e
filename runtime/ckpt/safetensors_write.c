/* safetensors_write.c — the streaming safetensors writer.
 *
 * The header is built with cJSON once every tensor is known, padded with spaces
 * to a multiple of 8 (so the data starts 8-aligned, as the Hugging Face writer
 * does), then the tensors' bytes follow in the order they were added. Nothing is
 * copied: a tensor is written from the caller's pointer, or produced by its fill
 * callback into a buffer that lives only while that tensor is written. */
#include "runtime/ckpt/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Offsets are JSON numbers, i.e. doubles: keep them exact. */
#define ST_MAX_DATA ((uint64_t)1 << 53)

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
    const void *data;
    st_fill_fn fill;
    void *ctx;
} wtensor;

typedef struct {
    char *key, *value;
} wmeta;

struct st_writer {
    wtensor *t;
    int n, cap;
    wmeta *meta;
    int n_meta, cap_meta;
    uint64_t data_bytes;
};


st_writer *st_writer_new(void)
{
    return calloc(1, sizeof(st_writer));
}

void st_writer_free(st_writer *w)
{
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->t);
    free(w->meta);
    free(w);
}

static int add(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape,
               const void *data, st_fill_fn fill, void *ctx, char *err, size_t errlen)
{
    if (!name || !*name || strcmp(name, "__metadata__") == 0)
        return st_fail(err, errlen, "safetensors: bad tensor name '%s'", name ? name : "(null)");
    if ((unsigned)dt >= ST_DTYPE_COUNT)
        return st_fail(err, errlen, "safetensors: tensor '%s': unknown dtype %d", name, (int)dt);
    if (ndim < 0 || ndim > ST_MAX_DIMS)
        return st_fail(err, errlen, "safetensors: tensor '%s': %d dims (at most %d)", name, ndim,
                    ST_MAX_DIMS);
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)shape[d], &numel))
            return st_fail(err, errlen, "safetensors: tensor '%s': bad shape", name);
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)st_dtype_size(dt), &nbytes) ||
        w->data_bytes + nbytes > ST_MAX_DATA)
        return st_fail(err, errlen, "safetensors: tensor '%s': too large", name);
    if (nbytes > 0 && !data && !fill)
        return st_fail(err, errlen, "safetensors: tensor '%s': no data", name);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return st_fail(err, errlen, "safetensors: tensor '%s' added twice", name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return st_fail(err, errlen, "safetensors: out of memory");
        w->t = t;
        w->cap = cap;
    }
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return st_fail(err, errlen, "safetensors: out of memory");
    t->dtype = dt;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->nbytes = nbytes;
    t->data = data;
    t->fill = fill;
    t->ctx = ctx;
    w->data_bytes += nbytes;
    w->n++;
    return 0;
}

int st_writer_add(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape,
                  const void *data, char *err, size_t errlen)
{
    return add(w, name, dt, ndim, shape, data, NULL, NULL, err, errlen);
}

int st_writer_add_fill(st_writer *w, const char *name, st_dtype dt, int ndim,
                       const int64_t *shape, st_fill_fn fill, void *ctx, char *err,
                       size_t errlen)
{
    if (!fill) return st_fail(err, errlen, "safetensors: tensor '%s': no fill function", name);
    return add(w, name, dt, ndim, shape, NULL, fill, ctx, err, errlen);
}

int st_writer_set_metadata(st_writer *w, const char *key, const char *value)
{
    for (int i = 0; i < w->n_meta; i++) {
        if (strcmp(w->meta[i].key, key) == 0) {
            char *v = strdup(value);
            if (!v) return -1;
            free(w->meta[i].value);
            w->meta[i].value = v;
            return 0;
        }
    }
    if (w->n_meta == w->cap_meta) {
        int cap = w->cap_meta ? 2 * w->cap_meta : 8;
        wmeta *m = realloc(w->meta, (size_t)cap * sizeof *m);
        if (!m) return -1;
        w->meta = m;
        w->cap_meta = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    w->meta[w->n_meta].key = k;
    w->meta[w->n_meta].value = v;
    w->n_meta++;
    return 0;
}

/* The JSON header (unpadded), or NULL when out of memory. */
static char *header_json(const st_writer *w)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    int ok = 1;
    if (w->n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok = meta != NULL;
        for (int i = 0; ok && i < w->n_meta; i++)
            ok = cJSON_AddStringToObject(meta, w->meta[i].key, w->meta[i].value) != NULL;
    }
    uint64_t off = 0;
    for (int i = 0; ok && i < w->n; i++) {
        const wtensor *t = &w->t[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = shape ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        ok = offs && cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dtype));
        for (int d = 0; ok && d < t->ndim; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + t->nbytes)));
        off += t->nbytes;
    }
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

uint64_t st_writer_file_size(st_writer *w)
{
    char *h = header_json(w);
    if (!h) return 0;
    uint64_t n = (strlen(h) + 7) & ~(uint64_t)7;
    free(h);
    return 8 + n + w->data_bytes;
}


int st_writer_write_fd(st_writer *w, int fd, const char *path, st_write_all_fn write_all,
                       char *err, size_t errlen)
{
    if (!write_all) write_all = st_write_all;
    char *json = header_json(w);
    if (!json) return st_fail(err, errlen, "%s: out of memory building the header", path);
    size_t len = strlen(json), padded = (len + 7) & ~(size_t)7;
    char *hdr = malloc(8 + padded);
    if (!hdr) {
        free(json);
        return st_fail(err, errlen, "%s: out of memory building the header", path);
    }
    uint64_t n = padded;
    memcpy(hdr, &n, 8); /* little-endian host */
    memcpy(hdr + 8, json, len);
    memset(hdr + 8 + len, ' ', padded - len);
    free(json);
    int rc = write_all(fd, hdr, 8 + padded);
    free(hdr);
    if (rc != 0) return st_fail(err, errlen, "%s: write failed (%s)", path, strerror(errno));
    for (int i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        if (t->nbytes == 0) continue;
        if (t->fill) {
            void *buf = malloc(t->nbytes);
            if (!buf) return st_fail(err, errlen, "%s: out of memory for tensor '%s'", path, t->name);
            if (t->fill(t->ctx, buf, t->nbytes, err, errlen) != 0) {
                free(buf);
                return -1;
            }
            rc = write_all(fd, buf, t->nbytes);
            free(buf);
        } else {
            rc = write_all(fd, t->data, t->nbytes);
        }
        if (rc != 0) return st_fail(err, errlen, "%s: write failed (%s)", path, strerror(errno));
    }
    return 0;
}
