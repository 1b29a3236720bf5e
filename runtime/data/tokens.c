/* tokens.c — llm.c token shards: a 1024-byte header of 256 little-endian int32
 * (magic 20240520, version 1, token count), then `count` uint16 tokens. A glob
 * (data/fineweb_train_*.bin) concatenates its matches in sorted order into one
 * stream; windows may straddle two shards, as if the shards were one file.
 * Every shard is mmapped and checked in full at open, so a bad token is an
 * answer at start-up and never a crash in the middle of a run. */
#include "runtime/data/source.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

/* llm.c writes the host's (little-endian) integers; tokens are read in place. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are little-endian");

enum { SHARD_HEADER_BYTES = 1024, SHARD_MAGIC = 20240520, SHARD_VERSION = 1 };

typedef struct {
    token_source base;
    int n_shards;
    mapped_file *files;
    const uint16_t **tokens; /* per shard, just past the header */
    long *start;             /* first stream position of each shard; start[n_shards] = n */
} shard_stream;

static void tokens_read(const token_source *s, long pos, int count, int *out)
{
    const shard_stream *t = (const shard_stream *)s;
    /* binary search: the last shard starting at or before pos */
    int lo = 0, hi = t->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t->start[mid] <= pos) lo = mid; else hi = mid - 1;
    }
    for (int shard = lo, i = 0; i < count; shard++) {
        long at = pos + i - t->start[shard];
        long avail = t->start[shard + 1] - t->start[shard] - at;
        for (; i < count && avail > 0; i++, at++, avail--)
            out[i] = t->tokens[shard][at];
    }
}

static void tokens_close(token_source *s)
{
    shard_stream *t = (shard_stream *)s;
    for (int i = 0; i < t->n_shards; i++)
        mapped_file_close(&t->files[i]);
    free(t->files);
    free(t->tokens);
    free(t->start);
    free(t);
}

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* Check one mapped shard: header, exact size, token ids. Returns the token count
 * or -1 with err written. */
static long check_shard(const mapped_file *f, const char *path, int vocab, char *err,
                        size_t errlen)
{
    if (f->len == 0) {
        data_fail(err, errlen, "%s: empty file (an llm.c token shard starts with a %d-byte header)",
                  path, SHARD_HEADER_BYTES);
        return -1;
    }
    if (f->len < SHARD_HEADER_BYTES) {
        data_fail(err, errlen, "%s: truncated (%zu bytes, shorter than the %d-byte header)", path,
                  f->len, SHARD_HEADER_BYTES);
        return -1;
    }
    int32_t magic = le32(f->bytes), version = le32(f->bytes + 4), count = le32(f->bytes + 8);
    if (magic != SHARD_MAGIC) {
        data_fail(err, errlen, "%s: wrong magic (%d, expected %d: not an llm.c token shard)", path,
                  magic, SHARD_MAGIC);
        return -1;
    }
    if (version != SHARD_VERSION) {
        data_fail(err, errlen, "%s: unsupported version (%d, only version %d has uint16 tokens)",
                  path, version, SHARD_VERSION);
        return -1;
    }
    if (count < 0) {
        data_fail(err, errlen, "%s: bad header (negative token count %d)", path, count);
        return -1;
    }
    size_t want = SHARD_HEADER_BYTES + 2 * (size_t)count;
    if (f->len != want) {
        data_fail(err, errlen, "%s: %s (header says %d tokens = %zu bytes, file has %zu bytes)",
                  path, f->len < want ? "truncated" : "longer than its header says", count, want,
                  f->len);
        return -1;
    }
    const uint16_t *tokens = (const uint16_t *)(f->bytes + SHARD_HEADER_BYTES);
    for (long i = 0; vocab <= 65535 && i < count; i++) {
        int tok = tokens[i];
        if (tok >= vocab) {
            data_fail(err, errlen,
                      "%s: token id out of the model's vocabulary (token %d at position %ld "
                      ">= vocab_size %d)",
                      path, tok, i, vocab);
            return -1;
        }
    }
    return count;
}

token_source *tokens_open(const char *pattern, int vocab, char *err, size_t errlen)
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
        t->start = calloc(g.gl_pathc + 1, sizeof *t->start);
    }
    if (!t || !t->files || !t->tokens || !t->start) {
        if (t) { free(t->files); free(t->tokens); free(t->start); free(t); }
        globfree(&g);
        return data_fail(err, errlen, "%s: out of memory", pattern);
    }
    t->base.read = tokens_read;
    t->base.close = tokens_close;
    long total = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        long count = -1;
        if (mapped_file_open(&t->files[i], path, err, errlen) == 0) {
            t->n_shards++; /* mapped: close() now owns it */
            count = check_shard(&t->files[i], path, vocab, err, errlen);
        }
        if (count < 0) {
            globfree(&g);
            tokens_close(&t->base);
            return NULL;
        }
        t->tokens[i] = (const uint16_t *)(t->files[i].bytes + SHARD_HEADER_BYTES);
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
