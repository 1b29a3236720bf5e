/* tokens.c — llm.c token shards (lib/text/shard_format.h): a 1024-byte header
 * of 256 little-endian int32 (magic, version, token count), then `count` ids,
 * uint16 (gpt-2 shards, magic 20240520) or uint32 (llama-3 shards, magic
 * 20240801); each shard of a glob may be of either kind. A glob
 * (data/fineweb_train_*.bin) concatenates its matches in sorted order into one
 * stream; windows may straddle two shards, as if the shards were one file.
 * Every shard is mmapped and checked in full at open, so a bad token is an
 * answer at start-up and never a crash in the middle of a run. */
#include "runtime/data/source.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/shard_format.h"

typedef struct {
    token_source base;
    int n_shards;
    mapped_file *files;
    const unsigned char **tokens; /* per shard, just past the header */
    int *id_bytes;                /* per shard: 2 or 4 */
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
            out[i] = (int)shard_id_at(t->tokens[shard], t->id_bytes[shard], at);
    }
}

static void tokens_close(token_source *s)
{
    shard_stream *t = (shard_stream *)s;
    for (int i = 0; i < t->n_shards; i++)
        mapped_file_close(&t->files[i]);
    free(t->files);
    free(t->tokens);
    free(t->id_bytes);
    free(t->start);
    free(t);
}

/* Check one mapped shard: header, exact size, token ids. Returns the token count
 * (*id_bytes: its id width) or -1 with err written. */
static long check_shard(const mapped_file *f, const char *path, int vocab, int *id_bytes, char *err,
                        size_t errlen)
{
    shard_header h;
    char why[512];
    if (shard_header_parse(f->bytes, f->len, f->len, &h, why, sizeof why) != 0) {
        data_fail(err, errlen, "%s: %s", path, why);
        return -1;
    }
    *id_bytes = h.id_bytes;
    int32_t count = h.count;
    const unsigned char *tokens = f->bytes + SHARD_HEADER_BYTES;
    for (long i = 0; (h.id_bytes == 4 || vocab <= 65535) && i < count; i++) {
        uint32_t tok = shard_id_at(tokens, h.id_bytes, i);
        if (tok >= (uint32_t)vocab) {
            data_fail(err, errlen,
                      "%s: token id out of the model's vocabulary (token %u at position %ld "
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
        t->id_bytes = calloc(g.gl_pathc, sizeof *t->id_bytes);
        t->start = calloc(g.gl_pathc + 1, sizeof *t->start);
    }
    if (!t || !t->files || !t->tokens || !t->id_bytes || !t->start) {
        if (t) { free(t->files); free(t->tokens); free(t->id_bytes); free(t->start); free(t); }
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
            count = check_shard(&t->files[i], path, vocab, &t->id_bytes[i], err, errlen);
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
