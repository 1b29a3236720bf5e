/* sft.c — instruction data (data.kind sft): SFT shards (lib/text/sft_shard.h,
 * man dtrun-job(5) "SFT SHARDS") read as samples, packed into windows of
 * seq_len tokens (source.h).
 *
 * Samples. A glob's shards in sorted order make one list of samples (a
 * sample never straddles two shards). Each shard is mmapped and checked
 * whole at open (header, starts, mask bytes): the table of samples needs its
 * starts anyway, and the windows' target counts its mask. A sample longer
 * than seq_len is refused (one line naming it) or, with data.long_samples:
 * truncate, cut to its first seq_len tokens.
 *
 * Windows. Samples [lo, hi) of the list (the split's) are packed in order,
 * first fit into the current window: a sample that does not fit starts the
 * next, and the rest of the window is padding. The packing is fixed when the
 * split opens (a pure function of the files and seq_len), so window w is the
 * same on every rank and in every layout; the loader (data.c) orders the
 * windows per epoch as it orders images.
 *
 * A window's rows (SFT_FORMAT): the samples' tokens one after the other;
 * row t's target is the next token when it is in the same sample and its
 * mask byte is 1, else -1 (the loss ignores it: never a prediction across a
 * boundary, nor of a prompt token); its position its place in its sample
 * (0 at each sample's first token); its segment the sample's index in the
 * window (0, 1, ...). Padding rows are one more segment: token 0, target -1,
 * positions 0, 1, ... */
#include "runtime/data/source.h"

#include <glob.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/sft_shard.h"
#include "lib/text/token_shard.h"

typedef struct {
    int shard;
    int len;    /* tokens taken (after truncation) */
    long start; /* first token, in the shard's ids */
} sft_sample;

struct sft_source {
    int n_shards;
    mapped_file *files;
    sft_shard_info *info;
    char **paths;
    long n_samples;
    sft_sample *samples;
    int seq_len;
    /* the packing of samples [lo, hi): window w holds samples
     * [first[w], first[w + 1]), targets[w] of its targets count */
    long n_windows;
    long *first;
    long *targets;
};

long sft_samples(const sft_source *s) { return s->n_samples; }
long sft_windows(const sft_source *s) { return s->n_windows; }
long sft_window_targets(const sft_source *s, long w) { return s->targets[w]; }

void sft_close(sft_source *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_shards; i++) {
        mapped_file_close(&s->files[i]);
        free(s->paths[i]);
    }
    free(s->files), free(s->info), free(s->paths), free(s->samples), free(s->first), free(s->targets);
    free(s);
}

static int64_t start_of(const sft_source *s, int shard, long k)
{
    int64_t v;
    memcpy(&v, s->files[shard].bytes + s->info[shard].starts_at + 8 * (size_t)k, sizeof v);
    return v;
}

static const unsigned char *mask_of(const sft_source *s, int shard)
{
    return s->files[shard].bytes + s->info[shard].mask_at;
}

static uint32_t id_of(const sft_source *s, int shard, long i)
{
    return token_shard_id(s->files[shard].bytes + s->info[shard].ids_at, s->info[shard].width, i);
}

/* One shard mapped and checked whole; its sample count, or -1 (err). */
static long open_shard(sft_source *s, int i, const char *path, char *err, size_t errlen)
{
    if (mapped_file_open(&s->files[i], path, err, errlen) != 0) return -1;
    s->paths[i] = strdup(path);
    s->n_shards++; /* mapped: close() now owns it */
    const mapped_file *f = &s->files[i];
    if (!s->paths[i]) {
        data_fail(err, errlen, "%s: out of memory", path);
        return -1;
    }
    if (sft_shard_check(f->bytes, f->len, f->len, path, &s->info[i], err, errlen) != 0 ||
        sft_shard_check_body(f->bytes, &s->info[i], path, err, errlen) != 0)
        return -1;
    return s->info[i].samples;
}

sft_source *sft_open(const char *pattern, int seq_len, int truncate, char *err, size_t errlen)
{
    glob_t g;
    int rc = glob(pattern, GLOB_NOCHECK, NULL, &g);
    if (rc != 0 || g.gl_pathc == 0) {
        if (rc == 0) globfree(&g);
        return data_fail(err, errlen, "%s: cannot expand the path (glob error %d)", pattern, rc);
    }
    sft_source *s = calloc(1, sizeof *s);
    if (s) {
        s->files = calloc(g.gl_pathc, sizeof *s->files);
        s->info = calloc(g.gl_pathc, sizeof *s->info);
        s->paths = calloc(g.gl_pathc, sizeof *s->paths);
    }
    if (!s || !s->files || !s->info || !s->paths) {
        sft_close(s);
        globfree(&g);
        return data_fail(err, errlen, "%s: out of memory", pattern);
    }
    s->seq_len = seq_len;
    long total = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        long n = open_shard(s, (int)i, g.gl_pathv[i], err, errlen);
        if (n < 0) {
            globfree(&g);
            sft_close(s);
            return NULL;
        }
        total += n;
    }
    globfree(&g);
    if (total == 0) {
        sft_close(s);
        return data_fail(err, errlen, "%s: no samples (every shard's header says 0 samples)", pattern);
    }
    s->samples = malloc((size_t)total * sizeof *s->samples);
    if (!s->samples) {
        sft_close(s);
        return data_fail(err, errlen, "%s: out of memory for %ld samples", pattern, total);
    }
    for (int i = 0; i < s->n_shards; i++)
        for (long k = 0; k < s->info[i].samples; k++) {
            int64_t a = start_of(s, i, k), len = start_of(s, i, k + 1) - a;
            if (len > seq_len && !truncate) {
                data_fail(err, errlen,
                          "%s: sample %ld has %lld tokens, more than model.seq_len %d (data.long_samples: "
                          "truncate keeps the first seq_len tokens of such samples)",
                          s->paths[i], k, (long long)len, seq_len);
                sft_close(s);
                return NULL;
            }
            s->samples[s->n_samples++] = (sft_sample){i, (int)(len < seq_len ? len : seq_len), (long)a};
        }
    return s;
}

/* The targets a sample gives: its tokens after the first with mask 1 (a
 * truncated sample's within its kept tokens). */
static long sample_targets(const sft_source *s, const sft_sample *x)
{
    const unsigned char *m = mask_of(s, x->shard) + x->start;
    long n = 0;
    for (int t = 1; t < x->len; t++) n += m[t];
    return n;
}

int sft_pack(sft_source *s, long lo, long hi, char *err, size_t errlen)
{
    free(s->first), free(s->targets);
    s->first = s->targets = NULL;
    s->n_windows = 0;
    long n = hi - lo;
    /* at most one window a sample, plus the closing entry */
    s->first = malloc((size_t)(n + 1) * sizeof *s->first);
    s->targets = calloc((size_t)(n + 1), sizeof *s->targets);
    if (!s->first || !s->targets) {
        data_fail(err, errlen, "out of memory for the packing of %ld samples", n);
        return -1;
    }
    int used = s->seq_len; /* no window open yet */
    for (long k = lo; k < hi; k++) {
        const sft_sample *x = &s->samples[k];
        if (used + x->len > s->seq_len) {
            s->first[s->n_windows++] = k;
            used = 0;
        }
        used += x->len;
        s->targets[s->n_windows - 1] += sample_targets(s, x);
    }
    s->first[s->n_windows] = hi;
    return 0;
}

void sft_window(const sft_source *s, long w, int *tok, int *tgt, int *pos, int *seg)
{
    int T = s->seq_len, t = 0, id = 0;
    for (long k = s->first[w]; k < s->first[w + 1]; k++, id++) {
        const sft_sample *x = &s->samples[k];
        const unsigned char *m = mask_of(s, x->shard) + x->start;
        for (int i = 0; i < x->len; i++, t++) {
            if (tok) tok[t] = (int)id_of(s, x->shard, x->start + i);
            if (tgt) tgt[t] = i + 1 < x->len && m[i + 1] ? (int)id_of(s, x->shard, x->start + i + 1) : -1;
            if (pos) pos[t] = i;
            if (seg) seg[t] = id;
        }
    }
    for (int p = 0; t < T; t++, p++) { /* padding: one more segment */
        if (tok) tok[t] = 0;
        if (tgt) tgt[t] = -1;
        if (pos) pos[t] = p;
        if (seg) seg[t] = id;
    }
}

const char *sft_locate(const sft_source *s, long w, int t, long *at)
{
    for (long k = s->first[w]; k < s->first[w + 1]; k++) {
        const sft_sample *x = &s->samples[k];
        if (t < x->len) {
            *at = x->start + t;
            return s->paths[x->shard];
        }
        t -= x->len;
    }
    *at = -1;
    return NULL;
}
