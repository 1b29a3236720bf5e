/* data.c — the loader: opens a source for the job's data kind, picks the
 * split's range of it and maps (seed, step, sample) to positions. All the
 * layout-independent indexing lives here, shared by every kind of source. */
#include "runtime/data/data.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#include "runtime/data/perm.h"
#include "runtime/data/source.h"
#include "runtime/rng.h"

#define DEFAULT_VAL_FRACTION 0.1

struct data_loader {
    data_split split;
    uint64_t seed;
    long global_batch;
    int seq_len;           /* GPT */
    int vocab;             /* GPT: every token id of a batch is below it */
    token_source *tokens;  /* GPT, else NULL */
    image_source *images;  /* ViT, else NULL */
    sft_source *sft;       /* instruction data (GPT, Llama), else NULL */
    long lo, hi;           /* the split's range of the source */
    long count;            /* samples: windows (GPT) or images (ViT) */
};

void *data_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

static const char *job_name(const job_spec *job) { return job->path[0] ? job->path : "job"; }

static const char *kind_name(data_kind k)
{
    switch (k) {
    case DATA_SYNTHETIC: return "synthetic";
    case DATA_TEXT: return "text";
    case DATA_TOKENS: return "tokens";
    case DATA_IDX: return "idx";
    case DATA_SFT: return "sft";
    }
    return "?";
}

/* IDX labels sit next to their images under torchvision's names
 * (train-images-idx3-ubyte.gz / train-labels-idx1-ubyte.gz): when the job names
 * no labels file, derive it. Returns 0, or -1 with err written. */
static int labels_path(const job_spec *job, const char *images, const char *labels,
                       const char *key, char *out, size_t outlen, char *err, size_t errlen)
{
    if (labels[0]) {
        snprintf(out, outlen, "%s", labels);
        return 0;
    }
    if (data_idx_labels_for(images, out, outlen) != 0) {
        data_fail(err, errlen,
                  "%s: data.%s is not set (IDX images %s need a labels file, and the name has no "
                  "'images-idx3' to derive it from)",
                  job_name(job), key, images);
        return -1;
    }
    return 0;
}

int data_idx_labels_for(const char *images, char *out, size_t outlen)
{
    const char *at = strstr(images, "images-idx3");
    if (!at) return -1;
    snprintf(out, outlen, "%.*slabels-idx1%s", (int)(at - images), images, at + strlen("images-idx3"));
    return 0;
}

/* Checks the model fields the data depends on, before touching any file. */
static int check_job(const job_spec *job, char *err, size_t errlen)
{
    const job_model *m = &job->model;
    if (job->train.global_batch < 1) {
        data_fail(err, errlen, "%s: train.global_batch must be >= 1 (got %d)", job_name(job),
                  job->train.global_batch);
        return -1;
    }
    if (job_model_is_lm(m) && (m->seq_len < 1 || m->vocab_size < 1)) {
        data_fail(err, errlen, "%s: model.seq_len and model.vocab_size must be >= 1 (got %d, %d)",
                  job_name(job), m->seq_len, m->vocab_size);
        return -1;
    }
    if (m->kind == MODEL_VIT && (m->image_size < 1 || m->channels < 1 || m->n_classes < 1)) {
        data_fail(err, errlen,
                  "%s: model.image_size, channels and n_classes must be >= 1 (got %d, %d, %d)",
                  job_name(job), m->image_size, m->channels, m->n_classes);
        return -1;
    }
    data_kind k = job->data.kind;
    if ((k == DATA_TEXT || k == DATA_TOKENS || k == DATA_SFT) && !job_model_is_lm(m)) {
        data_fail(err, errlen, "%s: data kind '%s' needs a GPT or Llama model (the model is a ViT)",
                  job_name(job), kind_name(k));
        return -1;
    }
    if (k == DATA_IDX && m->kind != MODEL_VIT) {
        data_fail(err, errlen, "%s: data kind 'idx' needs a ViT model (the model is a %s)", job_name(job),
                  job_model_kind_name(m->kind));
        return -1;
    }
    if (k != DATA_SYNTHETIC && !job->data.train_path[0]) {
        data_fail(err, errlen, "%s: data.train_path is not set (data kind '%s' reads a file)",
                  job_name(job), kind_name(k));
        return -1;
    }
    double f = job->data.val_fraction;
    if (f < 0 || f >= 1) {
        data_fail(err, errlen, "%s: data.val_fraction must be in [0, 1) (got %g)", job_name(job), f);
        return -1;
    }
    return 0;
}

/* Opens the source the split reads from. *whole is set when the split is the
 * whole source (its own file), else the split is carved from it. */
static int open_source(data_loader *d, const job_spec *job, data_split split, int *whole,
                       const char **path, char *err, size_t errlen)
{
    const job_data *dd = &job->data;
    int own_val = split == DATA_VAL && dd->val_path[0] && dd->kind != DATA_SYNTHETIC;
    *whole = (dd->val_path[0] && dd->kind != DATA_SYNTHETIC);
    *path = dd->kind == DATA_SYNTHETIC ? "synthetic" : own_val ? dd->val_path : dd->train_path;
    switch (dd->kind) {
    case DATA_SYNTHETIC:
        if (job_model_is_lm(&job->model))
            d->tokens = synthetic_tokens_open(job, err, errlen);
        else
            d->images = synthetic_images_open(job, err, errlen);
        break;
    case DATA_TEXT:
        d->tokens = text_open(*path, job->model.vocab_size, err, errlen);
        break;
    case DATA_TOKENS:
        d->tokens = tokens_open(*path, err, errlen);
        break;
    case DATA_SFT:
        d->sft = sft_open(*path, job->model.seq_len, dd->long_samples == LONG_TRUNCATE, err, errlen);
        break;
    case DATA_IDX: {
        char labels[JOB_PATH_MAX];
        const char *given = own_val ? dd->val_labels : dd->train_labels;
        if (labels_path(job, *path, given, own_val ? "val_labels" : "train_labels", labels,
                        sizeof labels, err, errlen) != 0)
            return -1;
        d->images = idx_open(*path, labels, &job->model, err, errlen);
        break;
    }
    default:
        data_fail(err, errlen, "%s: unknown data kind %d", job_name(job), (int)dd->kind);
        return -1;
    }
    return d->tokens || d->images || d->sft ? 0 : -1;
}

data_loader *data_open(const job_spec *job, data_split split, char *err, size_t errlen)
{
    if (check_job(job, err, errlen) != 0)
        return NULL;
    data_loader *d = calloc(1, sizeof *d);
    if (!d)
        return data_fail(err, errlen, "%s: out of memory", job_name(job));
    d->split = split;
    d->seed = job->train.seed;
    d->global_batch = job->train.global_batch;
    d->seq_len = job->model.seq_len;
    d->vocab = job->model.vocab_size;
    int whole;
    const char *path;
    if (open_source(d, job, split, &whole, &path, err, errlen) != 0) {
        data_close(d);
        return NULL;
    }
    long n = d->tokens ? d->tokens->n : d->sft ? sft_samples(d->sft) : d->images->n;
    double frac = job->data.val_fraction > 0 ? job->data.val_fraction : DEFAULT_VAL_FRACTION;
    long n_val = (long)(n * frac);
    char where[64]; /* names the part of the source in messages */
    if (whole) {
        d->lo = 0;
        d->hi = n;
        snprintf(where, sizeof where, "file");
    } else if (split == DATA_TRAIN) {
        d->lo = 0;
        d->hi = n - n_val;
        snprintf(where, sizeof where, "training split, the first %g%%", 100 * (1 - frac));
    } else {
        d->lo = n - n_val;
        d->hi = n;
        snprintf(where, sizeof where, "validation split, the last %g%%", 100 * frac);
    }
    long len = d->hi - d->lo;
    if (d->sft) {
        /* the split's samples packed into windows (sft.c) */
        if (sft_pack(d->sft, d->lo, d->hi, err, errlen) != 0) {
            data_close(d);
            return NULL;
        }
        d->count = sft_windows(d->sft);
        if (d->count < 1) {
            data_fail(err, errlen, "%s: no samples in the %s (%ld samples in all)", path, where, n);
            data_close(d);
            return NULL;
        }
    } else if (d->tokens) {
        /* train: every offset is a window; val: windows tile the split, stride
         * seq_len, so an evaluation covers it without overlap */
        d->count = split == DATA_TRAIN ? len - d->seq_len : (len - 1) / d->seq_len;
        if (d->count < 1) {
            data_fail(err, errlen,
                      "%s: too short for one sequence (%ld tokens in the %s; need at least "
                      "seq_len + 1 = %d)",
                      path, len, where, d->seq_len + 1);
            data_close(d);
            return NULL;
        }
    } else {
        d->count = len;
        if (d->count < 1) {
            data_fail(err, errlen, "%s: no images in the %s (%ld images in all)", path, where, n);
            data_close(d);
            return NULL;
        }
    }
    return d;
}

void data_close(data_loader *d)
{
    if (!d)
        return;
    if (d->tokens)
        d->tokens->close(d->tokens);
    if (d->images)
        d->images->close(d->images);
    sft_close(d->sft);
    free(d);
}

long data_count(const data_loader *d) { return d->count; }
long data_span(const data_loader *d) { return d->hi - d->lo; }

/* Sample j of step `step`, as an index into the split's windows or images. */
static long sample_index(const data_loader *d, uint64_t train_key, long step, long j)
{
    long g = step * d->global_batch + j; /* position in the split's sample stream */
    if (d->split == DATA_VAL)
        return g % d->count;
    if (d->tokens)
        return (long)rng_below(train_key, (uint64_t)j, (uint64_t)d->count);
    long epoch = g / d->count;
    uint64_t key = rng_key3(d->seed, "data.epoch", (uint64_t)epoch, 0);
    return (long)perm_index(key, (uint64_t)d->count, (uint64_t)(g % d->count));
}

/* The first read that faulted (a data file truncated under its mapping):
 * sticky for the process, so the step loop sees it after the batch. */
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static char fault_msg[1200];
static volatile int faulted;

/* Keeps the first fault's line. */
static void fault_record(const char *msg)
{
    pthread_mutex_lock(&fault_lock);
    if (!faulted) snprintf(fault_msg, sizeof fault_msg, "%s", msg);
    faulted = 1;
    pthread_mutex_unlock(&fault_lock);
}

int data_fault(char *msg, size_t n)
{
    char changed[sizeof fault_msg];
    if (!faulted && mapped_changed(changed, sizeof changed)) fault_record(changed);
    if (!faulted) return 0;
    pthread_mutex_lock(&fault_lock);
    snprintf(msg, n, "%s", fault_msg);
    pthread_mutex_unlock(&fault_lock);
    return 1;
}

long data_first_bad_id(const int *ids, long n, int vocab)
{
    for (long i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return i;
    return -1;
}

/* An id out of the vocabulary and where its file holds it: the fault. */
static void bad_id_record(const data_loader *d, const char *path, long at, int id)
{
    char msg[sizeof fault_msg];
    snprintf(msg, sizeof msg, "%.1000s: token id %d at token %ld of the file is out of the model's vocabulary "
                              "(model.vocab_size %d)", path ? path : "the token data", id, at, d->vocab);
    fault_record(msg);
}

/* The T ids read from stream position pos: all in the vocabulary, or the
 * fault is recorded (file, position, id) and 0 returned. */
static int ids_ok(const data_loader *d, long pos, const int *ids, int T)
{
    long bad = data_first_bad_id(ids, T, d->vocab);
    if (bad < 0) return 1;
    long at = pos + bad;
    const char *path = d->tokens->locate ? d->tokens->locate(d->tokens, pos + bad, &at) : NULL;
    bad_id_record(d, path, at, ids[bad]);
    return 0;
}

/* A packed window's ids (its targets are ids of its own rows): all in the
 * vocabulary, or the fault recorded and 0 returned. */
static int window_ids_ok(const data_loader *d, long w, const int *ids, int T)
{
    long bad = data_first_bad_id(ids, T, d->vocab);
    if (bad < 0) return 1;
    long at;
    const char *path = sft_locate(d->sft, w, (int)bad, &at);
    bad_id_record(d, path, at, ids[bad]);
    return 0;
}

/* What batch_read fills: any of them may be NULL. */
typedef struct {
    int *tokens, *targets;
    float *images;
    int *labels;
    int *positions, *segments; /* packed instruction data (data_batch_docs) */
} batch_out;

static void batch_fill(data_loader *d, long step, int begin, int count, const batch_out *o);

static void batch_read(data_loader *d, long step, int begin, int count, const batch_out *o);

void data_batch(data_loader *d, long step, int begin, int count,
                int *tokens, int *targets, float *images, int *labels)
{
    batch_out o = {tokens, targets, images, labels, NULL, NULL};
    batch_read(d, step, begin, count, &o);
}

int data_packed(const data_loader *d) { return d->sft != NULL; }

void data_batch_docs(data_loader *d, long step, int begin, int count, int *positions, int *segments)
{
    batch_out o = {NULL, NULL, NULL, NULL, positions, segments};
    batch_read(d, step, begin, count, &o);
}

long data_batch_targets(const data_loader *d, long step, int begin, int count)
{
    if (!d->sft) return (long)count * (d->tokens ? d->seq_len : 1);
    uint64_t train_key = rng_key3(d->seed, "data.train", (uint64_t)step, 0);
    long n = 0;
    for (int b = 0; b < count; b++) n += sft_window_targets(d->sft, sample_index(d, train_key, step, begin + b));
    return n;
}

static void batch_read(data_loader *d, long step, int begin, int count, const batch_out *o)
{
    int *tokens = o->tokens, *targets = o->targets, *labels = o->labels;
    float *images = o->images;
    if (mapped_guard_begin() == 0) {
        batch_fill(d, step, begin, count, o);
        mapped_guard_end();
        return;
    }
    /* a read faulted: record which file, leave harmless samples (the step's
     * update is not applied: train.c stops at this step with a checkpoint) */
    char msg[sizeof fault_msg];
    mapped_guard_describe(msg, sizeof msg);
    fault_record(msg);
    size_t T = d->tokens || d->sft ? (size_t)d->seq_len : 0;
    if (tokens) memset(tokens, 0, (size_t)count * T * sizeof(int));
    if (targets)
        for (size_t i = 0; i < (size_t)count * T; i++) targets[i] = -1;
    for (size_t i = 0; i < (size_t)count * T; i++) { /* one segment a window */
        if (o->positions) o->positions[i] = (int)(i % T);
        if (o->segments) o->segments[i] = 0;
    }
    if (labels)
        for (int i = 0; i < count; i++) labels[i] = -1;
    if (images && d->images)
        memset(images, 0, (size_t)count * d->images->channels * d->images->size * d->images->size * sizeof(float));
}

/* Window w of packed samples into sample b of o; an id outside the
 * vocabulary (the window's tokens hold its targets' ids too) makes it a
 * sample the loss ignores, and the step stops (data_fault). */
static void window_fill(data_loader *d, long w, int b, const batch_out *o)
{
    size_t T = (size_t)d->seq_len, at = (size_t)b * T;
    int *x = o->tokens ? o->tokens + at : NULL, *y = o->targets ? o->targets + at : NULL;
    sft_window(d->sft, w, x, y, o->positions ? o->positions + at : NULL, o->segments ? o->segments + at : NULL);
    if (!x && !y) return; /* the document structure alone: no ids read */
    int *ids = x ? x : malloc(T * sizeof *ids); /* targets alone: check the window's ids all the same */
    if (ids && ids != x) sft_window(d->sft, w, ids, NULL, NULL, NULL);
    int ok = !ids || window_ids_ok(d, w, ids, (int)T);
    if (ids != x) free(ids);
    if (ok) return;
    if (x) memset(x, 0, T * sizeof *x);
    if (y)
        for (size_t t = 0; t < T; t++) y[t] = -1;
}

static void batch_fill(data_loader *d, long step, int begin, int count, const batch_out *o)
{
    int *tokens = o->tokens, *targets = o->targets, *labels = o->labels;
    float *images = o->images;
    uint64_t train_key = rng_key3(d->seed, "data.train", (uint64_t)step, 0);
    for (int b = 0; b < count; b++) {
        long i = sample_index(d, train_key, step, begin + b);
        if (d->sft) {
            window_fill(d, i, b, o);
        } else if (d->tokens) {
            int T = d->seq_len;
            long pos = d->lo + (d->split == DATA_VAL ? i * T : i);
            int *x = tokens ? tokens + (size_t)b * T : NULL, *y = targets ? targets + (size_t)b * T : NULL;
            if (x) d->tokens->read(d->tokens, pos, T, x);
            if (y) d->tokens->read(d->tokens, pos + 1, T, y);
            /* an id past the embedding's table would be read outside it: the
             * sample becomes one the loss ignores, and the step stops (data_fault) */
            if ((x && !ids_ok(d, pos, x, T)) | (y && !ids_ok(d, pos + 1, y, T))) {
                if (x) memset(x, 0, (size_t)T * sizeof *x);
                if (y)
                    for (int t = 0; t < T; t++) y[t] = -1;
            }
        } else {
            size_t npix = (size_t)d->images->channels * d->images->size * d->images->size;
            d->images->read(d->images, d->lo + i, images ? images + (size_t)b * npix : NULL,
                            labels ? labels + b : NULL);
        }
    }
}
