/* shard_writer.c — see shard_writer.h. */
#include "lib/text/shard_writer.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "lib/text/token_shard.h"
#include "lib/util/errline.h"

void shard_writer_path(const shard_writer *w, int i, char *out, size_t cap)
{
    snprintf(out, cap, "%s_%s_%06d.bin", w->prefix, w->split, i);
}

static int write_header(shard_writer *w, int32_t count)
{
    int32_t h[TOKEN_SHARD_HEADER_INTS] = {w->magic, w->version, count};
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

static int finish_shard(shard_writer *w, char *err, size_t errlen)
{
    char path[SHARD_PATH_MAX];
    shard_writer_path(w, w->n_shards - 1, path, sizeof path);
    int bad = write_header(w, (int32_t)w->in_shard) != 0;
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

int shard_writer_put(shard_writer *w, const uint32_t *ids, size_t n, char *err, size_t errlen)
{
    uint16_t buf[4096];
    while (n > 0) {
        if (w->in_shard == w->shard_tokens) {
            if (finish_shard(w, err, errlen) != 0 || start_shard(w, err, errlen) != 0) return -1;
        }
        size_t room = (size_t)(w->shard_tokens - w->in_shard), k = n < room ? n : room;
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

int shard_writer_close(shard_writer *w, char *err, size_t errlen)
{
    return w->f ? finish_shard(w, err, errlen) : 0;
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
}
