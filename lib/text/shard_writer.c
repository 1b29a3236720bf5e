/* shard_writer.c — see shard_writer.h. */
#include "lib/text/shard_writer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/text/sft_shard.h"
#include "lib/text/token_shard.h"
#include "lib/util/errline.h"

void shard_writer_path(const shard_writer *w, int i, char *out, size_t cap)
{
    snprintf(out, cap, "%s_%s_%06d.bin", w->prefix, w->split, i);
}

static int write_header(shard_writer *w, int32_t count)
{
    int32_t h[TOKEN_SHARD_HEADER_INTS] = {w->magic, w->version, count};
    if (w->sft) {
        h[3] = w->n_starts ? (int32_t)w->n_starts - 1 : 0; /* starts holds S + 1 once the shard is complete */
        h[4] = w->width;
    }
    return fseek(w->f, 0, SEEK_SET) == 0 && fwrite(h, sizeof h, 1, w->f) == 1 ? 0 : -1;
}

static int start_shard(shard_writer *w, char *err, size_t errlen)
{
    char path[SHARD_PATH_MAX];
    shard_writer_path(w, w->n_shards, path, sizeof path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) return errline(err, errlen, "%s: cannot write (%s)", path, strerror(errno));
    w->n_shards++;
    w->in_shard = 0;
    w->n_starts = 0;
    if (write_header(w, 0) != 0) {
        int e = errno;
        fclose(w->f);
        w->f = NULL;
        unlink(w->tmp);
        w->n_shards--;
        return errline(err, errlen, "%s: cannot write (%s)", path, strerror(e));
    }
    return 0;
}

static int push_start(shard_writer *w, int64_t at)
{
    if (w->n_starts == w->starts_cap) {
        size_t cap = w->starts_cap ? 2 * w->starts_cap : 1024;
        int64_t *s = realloc(w->starts, cap * sizeof *s);
        if (!s) return -1;
        w->starts = s;
        w->starts_cap = cap;
    }
    w->starts[w->n_starts++] = at;
    return 0;
}

static int finish_shard(shard_writer *w, char *err, size_t errlen)
{
    char path[SHARD_PATH_MAX];
    shard_writer_path(w, w->n_shards - 1, path, sizeof path);
    int bad = 0;
    if (w->sft) { /* the mask and the starts (the last one: N) after the ids */
        bad = push_start(w, w->in_shard) != 0;
        bad = bad || fwrite(w->mask, 1, (size_t)w->in_shard, w->f) != (size_t)w->in_shard ||
              fwrite(w->starts, sizeof *w->starts, w->n_starts, w->f) != w->n_starts;
    }
    bad = bad || write_header(w, (int32_t)w->in_shard) != 0;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (bad || rename(w->tmp, path) != 0) return errline(err, errlen, "%s: cannot write (%s)", path, strerror(errno));
    return 0;
}

int shard_writer_open(shard_writer *w, const char *prefix, const char *split, long shard_tokens, long n_ids,
                      char *err, size_t errlen)
{
    *w = (shard_writer){.split = split, .shard_tokens = shard_tokens};
    token_shard_format_for(n_ids, &w->magic, &w->version, &w->width);
    snprintf(w->prefix, sizeof w->prefix, "%s", prefix);
    return start_shard(w, err, errlen);
}

int shard_writer_open_sft(shard_writer *w, const char *prefix, const char *split, long shard_tokens, long n_ids,
                          char *err, size_t errlen)
{
    *w = (shard_writer){.split = split, .shard_tokens = shard_tokens, .sft = 1, .magic = SFT_SHARD_MAGIC,
                        .version = SFT_SHARD_VERSION, .width = n_ids > 65536 ? 4 : 2};
    snprintf(w->prefix, sizeof w->prefix, "%s", prefix);
    return start_shard(w, err, errlen);
}

/* The ids into the open shard, up to `limit` tokens in it (then the next). */
static int put_ids(shard_writer *w, const uint32_t *ids, size_t n, long limit, char *err, size_t errlen)
{
    uint16_t buf[4096];
    while (n > 0) {
        if (w->in_shard >= limit) {
            if (finish_shard(w, err, errlen) != 0 || start_shard(w, err, errlen) != 0) return -1;
        }
        size_t room = (size_t)(limit - w->in_shard), k = n < room ? n : room;
        if (k > sizeof buf / sizeof buf[0]) k = sizeof buf / sizeof buf[0];
        const void *out = ids; /* uint32 shards take the ids as they are */
        if (w->width == 2) {
            for (size_t i = 0; i < k; i++) {
                if (ids[i] > UINT16_MAX)
                    return errline(err, errlen, "token id %u does not fit the shards' uint16", (unsigned)ids[i]);
                buf[i] = (uint16_t)ids[i];
            }
            out = buf;
        }
        if (fwrite(out, (size_t)w->width, k, w->f) != k) {
            char path[SHARD_PATH_MAX];
            shard_writer_path(w, w->n_shards - 1, path, sizeof path);
            return errline(err, errlen, "%s: cannot write (%s)", path, strerror(errno));
        }
        w->in_shard += (long)k;
        w->total += (long)k;
        ids += k;
        n -= k;
    }
    return 0;
}

int shard_writer_put(shard_writer *w, const uint32_t *ids, size_t n, char *err, size_t errlen)
{
    return put_ids(w, ids, n, w->shard_tokens, err, errlen);
}

int shard_writer_put_sample(shard_writer *w, const uint32_t *ids, const unsigned char *mask, size_t n, char *err,
                            size_t errlen)
{
    if (n == 0) return 0;
    if (n > (size_t)INT32_MAX - 1)
        return errline(err, errlen, "a sample of %zu tokens: more than an SFT shard's int32 count holds", n);
    if (w->in_shard > 0 && (size_t)w->in_shard + n > (size_t)w->shard_tokens) { /* whole samples only */
        if (finish_shard(w, err, errlen) != 0 || start_shard(w, err, errlen) != 0) return -1;
    }
    size_t need = (size_t)w->in_shard + n;
    if (need > w->mask_cap) {
        size_t cap = w->mask_cap ? w->mask_cap : 4096;
        while (cap < need) cap *= 2;
        unsigned char *m = realloc(w->mask, cap);
        if (!m) return errline(err, errlen, "out of memory (the loss mask of %zu tokens)", need);
        w->mask = m;
        w->mask_cap = cap;
    }
    if (push_start(w, w->in_shard) != 0) return errline(err, errlen, "out of memory (sample starts)");
    memcpy(w->mask + w->in_shard, mask, n);
    w->samples++;
    /* a sample longer than a shard gets the shard to itself */
    return put_ids(w, ids, n, w->in_shard + (long)n, err, errlen);
}

static void release(shard_writer *w)
{
    free(w->mask);
    free(w->starts);
    w->mask = NULL;
    w->starts = NULL;
    w->mask_cap = w->starts_cap = w->n_starts = 0;
}

int shard_writer_close(shard_writer *w, char *err, size_t errlen)
{
    int rc = w->f ? finish_shard(w, err, errlen) : 0;
    release(w);
    return rc;
}

void shard_writer_abort(shard_writer *w)
{
    int complete = w->n_shards;
    if (w->f) { /* the last shard is still under its temporary name */
        fclose(w->f);
        w->f = NULL;
        unlink(w->tmp);
        complete--;
    }
    for (int i = 0; i < complete; i++) {
        char path[SHARD_PATH_MAX];
        shard_writer_path(w, i, path, sizeof path);
        unlink(path);
    }
    w->n_shards = 0;
    release(w);
}
