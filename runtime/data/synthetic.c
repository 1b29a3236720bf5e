/* synthetic.c — deterministic data that a model can learn, for runs and tests
 * without files. Everything is a pure function of (seed, position), so the
 * loader cuts windows and walks epochs exactly as it does for real files.
 *
 * GPT: a virtual stream of synthetic_size tokens, made of chunks of
 * SYNTH_CHUNK tokens. A chunk starts at a random token; each next token is
 * succ(previous) with probability 1 - SYNTH_TOKEN_NOISE, else uniform.
 * succ is a fixed random permutation of the vocabulary (keyed by the seed), so
 * the loss can fall from ln(V) to about 0.1 ln(10 V): a bigram any model
 * learns in a few hundred steps.
 *
 * ViT: synthetic_size images. Image i has label uniform in [0, n_classes) and
 * pixels = its class's plane wave, sin(2 pi (fx x + fy y) / S + phase + ch),
 * with (fx, fy, phase) drawn per class, plus uniform noise in
 * [-SYNTH_PIXEL_NOISE, SYNTH_PIXEL_NOISE). */
#include "runtime/data/source.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/data/perm.h"
#include "runtime/rng.h"

enum { SYNTH_CHUNK = 256 };
#define SYNTH_TOKEN_NOISE 0.1
#define SYNTH_PIXEL_NOISE 1.0f
#define SYNTH_DEFAULT_TOKENS (1L << 20)
#define SYNTH_DEFAULT_IMAGES 10000L

/* ---- GPT ---- */

typedef struct {
    token_source base;
    int vocab;
    int *succ;          /* [vocab]: the token that usually follows */
    uint64_t key_start; /* chunk -> first token */
    uint64_t key_step;  /* position -> noise draw */
} synth_tokens;

/* Token at position p, given the token at p - 1 (ignored at a chunk start). */
static int synth_token(const synth_tokens *s, long p, int prev)
{
    if (p % SYNTH_CHUNK == 0)
        return (int)rng_below(s->key_start, (uint64_t)(p / SYNTH_CHUNK), (uint64_t)s->vocab);
    uint32_t w[4];
    rng_u32x4(s->key_step, (uint64_t)p, w);
    if (w[0] < (uint32_t)(SYNTH_TOKEN_NOISE * 4294967296.0))
        return (int)(((uint64_t)w[1] * (uint64_t)s->vocab) >> 32);
    return s->succ[prev];
}

static void synth_tokens_read(const token_source *base, long pos, int count, int *out)
{
    const synth_tokens *s = (const synth_tokens *)base;
    /* walk from the start of pos's chunk: the chain is sequential */
    int tok = 0;
    for (long p = pos - pos % SYNTH_CHUNK; p < pos + count; p++) {
        tok = synth_token(s, p, tok);
        if (p >= pos)
            out[p - pos] = tok;
    }
}

static void synth_tokens_close(token_source *base)
{
    synth_tokens *s = (synth_tokens *)base;
    free(s->succ);
    free(s);
}

token_source *synthetic_tokens_open(const job_spec *job, char *err, size_t errlen)
{
    int vocab = job->model.vocab_size;
    if (vocab < 2)
        return data_fail(err, errlen, "synthetic: vocabulary too small (model.vocab_size %d, need >= 2)",
                         vocab);
    synth_tokens *s = calloc(1, sizeof *s);
    int *succ = malloc((size_t)vocab * sizeof *succ);
    if (!s || !succ) {
        free(s);
        free(succ);
        return data_fail(err, errlen, "synthetic: out of memory (vocab_size %d)", vocab);
    }
    uint64_t seed = job->train.seed;
    uint64_t key_succ = rng_key(seed, "data.synthetic.succ");
    for (int v = 0; v < vocab; v++)
        succ[v] = (int)perm_index(key_succ, (uint64_t)vocab, (uint64_t)v);
    s->base.n = job->data.synthetic_size > 0 ? job->data.synthetic_size : SYNTH_DEFAULT_TOKENS;
    s->base.read = synth_tokens_read;
    s->base.close = synth_tokens_close;
    s->vocab = vocab;
    s->succ = succ;
    s->key_start = rng_key(seed, "data.synthetic.start");
    s->key_step = rng_key(seed, "data.synthetic.step");
    return &s->base;
}

/* ---- ViT ---- */

typedef struct {
    image_source base;
    int n_classes;
    uint64_t key_label; /* image -> label */
    uint64_t key_noise; /* image -> pixel noise */
    /* sin(a + b) = sin a cos b + cos a sin b with a from x and b from y, so a
     * class's wave is tabled per row and column: [n_classes][channels + 1][2][S]
     * = sin/cos of a for each channel, then sin/cos of b. */
    float *wave;
} synth_images;

static const float *class_wave(const synth_images *s, int c)
{
    return s->wave + (size_t)c * (s->base.channels + 1) * 2 * s->base.size;
}

static void synth_images_read(const image_source *base, long i, float *pixels, int *label)
{
    const synth_images *s = (const synth_images *)base;
    int c = (int)rng_below(s->key_label, (uint64_t)i, (uint64_t)s->n_classes);
    if (label)
        *label = c;
    if (!pixels)
        return;
    int S = base->size;
    const float *wave = class_wave(s, c);
    const float *sin_y = wave + (size_t)base->channels * 2 * S, *cos_y = sin_y + S;
    /* noise first, 8 pixels of 16 random bits per Philox draw; then the wave */
    size_t npix = (size_t)base->channels * S * S;
    uint64_t noise_base = (uint64_t)i * ((npix + 7) / 8);
    for (size_t p0 = 0; p0 < npix; p0 += 8) {
        uint32_t w[4];
        rng_u32x4(s->key_noise, noise_base + p0 / 8, w);
        for (size_t k = 0; k < 8 && p0 + k < npix; k++) {
            uint32_t bits16 = (w[k / 2] >> (16 * (k % 2))) & 0xffff;
            pixels[p0 + k] = SYNTH_PIXEL_NOISE * ((float)bits16 / 32768.0f - 1.0f);
        }
    }
    float *px = pixels;
    for (int ch = 0; ch < base->channels; ch++) {
        const float *sin_x = wave + (size_t)ch * 2 * S, *cos_x = sin_x + S;
        for (int y = 0; y < S; y++, px += S)
            for (int x = 0; x < S; x++)
                px[x] += sin_x[x] * cos_y[y] + cos_x[x] * sin_y[y];
    }
}

static void synth_images_close(image_source *base)
{
    synth_images *s = (synth_images *)base;
    free(s->wave);
    free(s);
}

image_source *synthetic_images_open(const job_spec *job, char *err, size_t errlen)
{
    const job_model *m = &job->model;
    if (m->image_size < 1 || m->channels < 1 || m->n_classes < 1)
        return data_fail(err, errlen,
                         "synthetic: bad image shape (image_size %d, channels %d, n_classes %d; "
                         "all must be >= 1)",
                         m->image_size, m->channels, m->n_classes);
    int S = m->image_size, C = m->channels;
    synth_images *s = calloc(1, sizeof *s);
    float *wave = malloc((size_t)m->n_classes * (C + 1) * 2 * S * sizeof *wave);
    if (!s || !wave) {
        free(s);
        free(wave);
        return data_fail(err, errlen, "synthetic: out of memory (tables for %d classes)",
                         m->n_classes);
    }
    uint64_t seed = job->train.seed;
    s->base.n = job->data.synthetic_size > 0 ? job->data.synthetic_size : SYNTH_DEFAULT_IMAGES;
    s->base.channels = C;
    s->base.size = S;
    s->base.read = synth_images_read;
    s->base.close = synth_images_close;
    s->n_classes = m->n_classes;
    s->key_label = rng_key(seed, "data.synthetic.label");
    s->key_noise = rng_key(seed, "data.synthetic.noise");
    s->wave = wave;
    uint64_t key_class = rng_key(seed, "data.synthetic.class");
    for (int c = 0; c < m->n_classes; c++) {
        uint32_t w[4];
        rng_u32x4(key_class, (uint64_t)c, w);
        int fx = 1 + (int)(w[0] % 4), fy = 1 + (int)(w[1] % 4);
        double phase = 2.0 * M_PI * (w[2] / 4294967296.0);
        double flip = (w[3] & 1) ? -1.0 : 1.0; /* tells apart classes with equal waves */
        float *cw = wave + (size_t)c * (C + 1) * 2 * S;
        for (int ch = 0; ch <= C; ch++) {
            for (int t = 0; t < S; t++) {
                double a = ch < C ? 2.0 * M_PI * fx * t / S + phase + ch : 2.0 * M_PI * fy * t / S;
                double amp = ch < C ? flip : 1.0;
                cw[(size_t)ch * 2 * S + t] = (float)(amp * sin(a));
                cw[(size_t)ch * 2 * S + S + t] = (float)(amp * cos(a));
            }
        }
    }
    return &s->base;
}
