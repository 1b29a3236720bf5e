/* tokens.c — llm.c token shards (lib/text/token_shard.h): a 1024-byte header
 * of 256 little-endian int32 (magic, version, token count), then `count` ids,
 * uint16 (gpt-2 shards, magic 20240520) or uint32 (llama-3 shards, magic
 * 20240801); each shard of a glob may be of either kind. A glob
 * (data/fineweb_train_*.bin) concatenates its matches in sorted order into one
 * stream; windows may straddle two shards, as if the shards were one file.
 * Every shard is mmapped and its header checked at open; token ids are the
 * loader's to check, batch by batch (data.c), and a file changed under the run
 * too (mapped_changed at each step). */
#include "runtime/data/source.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/token_shard.h"

enum { SHARD_HEADER_BYTES = TOKEN_SHARD_HEADER_BYTES };

typedef struct {
    token_source base;
    int n_shards;
    mapped_file *files;
    const unsigned char **tokens; /* per shard, just past the header */
    int *width;                   /* per shard: bytes per id, 2 or 4 */
    long *start;             /* first stream position of each shard; start[n_shards] = n */
    char **paths;            /* per shard, for messages */
} shard_stream;

/* The last shard starting at or before pos (binary search). */
static int shard_of(const shard_stream *t, long pos)
{
    int lo = 0, hi = t->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t->start[mid] <= pos) lo = mid; else hi = mid - 1;
    }
    return lo;
}

static const char *tokens_locate(const token_source *s, long pos, long *at)
{
    const shard_stream *t = (const shard_stream *)s;
    int shard = shard_of(t, pos);
    *at = pos - t->start[shard];
    return t->paths[shard];
}

static void tokens_read(const token_source *s, long pos, int count, int *out)
{
    const shard_stream *t = (const shard_stream *)s;
    int lo = shard_of(t, pos);
    for (int shard = lo, i = 0; i < count; shard++) {
        long at = pos + i - t->start[shard];
        long avail = t->start[shard + 1] - t->start[shard] - at;
        for (; i < count && avail > 0; i++, at++, avail--)
            out[i] = (int)token_shard_id(t->tokens[shard], t->width[shard], at);
    }
}

static void tokens_close(token_source *s)
{
    shard_stream *t = (shard_stream *)s;
    for (int i = 0; i < t->n_shards; i++) {
        mapped_file_close(&t->files[i]);
        free(t->paths[i]);
    }
    free(t->paths);
    free(t->files);
    free(t->tokens);
    free(t->width);
    free(t->start);
    free(t);
}

/* Check one mapped shard's header against its size (lib/text/token_shard.h).
 * Returns the token count (*width: bytes per id) or -1 with err written. Token
 * ids are not read here: the loader checks each batch's (data.c), so opening
 * costs the headers only, however large the corpus. */
static long check_shard(const mapped_file *f, const char *path, int *width, char *err, size_t errlen)
{
    token_shard_info info;
    if (token_shard_check(f->bytes, f->len, f->len, path, &info, err, errlen) != 0) return -1;
    *width = info.width;
    return info.count;
}

token_source *tokens_open(const char *pattern, char *err, size_t errlen)
{
    /* GLOB_NOCHECK: a missing plain path comes back as itself, and open() then
     * says why it is missing. */
    glob_t g;
    int rc = glob(pattern, GLOB_NOCHECK, NULL, &g);
    if (rc != 0 || g.gl_pathc == 0) {
        if (rc == 0) globfree(&g);
        return data_fail(err, errlen, "%s: cannot expand the path (glob error %d)", pattern, rc);
    }
    shard_stream *t = calloc(1, sizeof *t);
    if (t) {
        t->files = calloc(g.gl_pathc, sizeof *t->files);
        t->tokens = calloc(g.gl_pathc, sizeof *t->tokens);
        t->width = calloc(g.gl_pathc, sizeof *t->width);
        t->start = calloc(g.gl_pathc + 1, sizeof *t->start);
        t->paths = calloc(g.gl_pathc, sizeof *t->paths);
    }
    if (!t || !t->files || !t->tokens || !t->width || !t->start || !t->paths) {
        if (t) { free(t->files); free(t->tokens); free(t->width); free(t->start); free(t->paths); free(t); }
        globfree(&g);
        return data_fail(err, errlen, "%s: out of memory", pattern);
    }
    t->base.read = tokens_read;
    t->base.locate = tokens_locate;
    t->base.close = tokens_close;
    long total = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        long count = -1;
        if (mapped_file_open(&t->files[i], path, err, errlen) == 0) {
            t->paths[i] = strdup(path);
            t->n_shards++; /* mapped: close() now owns it */
            count = check_shard(&t->files[i], path, &t->width[i], err, errlen);
        }
        if (count < 0) {
            globfree(&g);
            tokens_close(&t->base);
            return NULL;
        }
        t->tokens[i] = t->files[i].bytes + SHARD_HEADER_BYTES;
        t->start[i] = total;
        total += count;
    }
    t->start[t->n_shards] = total;
    t->base.n = total;
    globfree(&g);
    if (total == 0) {
        tokens_close(&t->base);
        return data_fail(err, errlen, "%s: no tokens (every shard's header says 0 tokens)", pattern);
    }
    return &t->base;
}
