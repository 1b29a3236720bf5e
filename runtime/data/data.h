/* data.h — training and validation data, layout-independent.
 *
 * Sources: synthetic, byte-level text (any file), llm.c token shards (1024-byte
 * header of int32: magic 20240520, version 1, token count; then uint16 tokens),
 * IDX images + labels (MNIST / Fashion-MNIST, plain or .gz).
 *
 * The global batch of step k is a pure function of (seed, k, split): sample j of
 * it is always the same, whichever rank asks. A data-parallel rank asks only for
 * its slice [begin, begin + count) of the global batch.
 *  - GPT: sample j of step k is a window of seq_len + 1 tokens at an offset drawn
 *    from (seed, k, j); inputs are the first seq_len, targets the last seq_len.
 *  - ViT: position g = k * global_batch + j walks a fresh pseudo-random
 *    permutation of the images every epoch (a stateless bijection of (seed,
 *    epoch)), so every image is seen once per epoch.
 * Validation batches (split DATA_VAL) walk the validation set in order from the
 * start, batch k = samples [k * global_batch, ...) wrapping around; GPT
 * validation windows tile the split with stride seq_len (no overlap).
 *
 * Splits: with data.val_path set, each split reads its own file (IDX labels:
 * data.train_labels / val_labels, or derived from the images' name by
 * replacing "images-idx3" with "labels-idx1"). Without it, validation is the
 * last data.val_fraction (0 means 0.1) of the train file — bytes, tokens or
 * images — and training the rest. Synthetic data is a virtual file of
 * data.synthetic_size tokens or images (0 means 2^20 tokens / 10000 images),
 * split the same way; see synthetic.c for what a model can learn from it.
 * IDX pixels are normalised as (x / 255 - 0.2860) / 0.3530 (Fashion-MNIST).
 */
#ifndef DTRUN_DATA_H
#define DTRUN_DATA_H

#include <stddef.h>
#include "lib/job/jobspec.h"

/* How image pixels reach the model: (x / 255 - mean) / std, every channel
 * (Fashion-MNIST's statistics). Also what `dtrun export` writes into a ViT
 * folder's preprocessor_config.json and `dtrun classify` applies for a dtrun
 * checkpoint. */
#define DATA_PIXEL_MEAN 0.2860f
#define DATA_PIXEL_STD 0.3530f

/* The labels file of IDX images under torchvision's names: "images-idx3"
 * replaced by "labels-idx1" (train-images-idx3-ubyte.gz ->
 * train-labels-idx1-ubyte.gz). -1 when the name has no "images-idx3". */
int data_idx_labels_for(const char *images, char *out, size_t outlen);

/* IDX images and labels as stored (plain or gzip), any image size, for a
 * reader that preprocesses them itself (dtrun classify --data). 0, or -1
 * with one line in err (the loader's checks: magic, counts, truncation). */
typedef struct {
    long n;
    int rows, cols;
    unsigned char *pixels; /* [n][rows][cols] */
    unsigned char *labels; /* [n] */
} data_idx;
int data_idx_read(const char *images_path, const char *labels_path, data_idx *out, char *err, size_t errlen);
void data_idx_free(data_idx *d);

typedef enum { DATA_TRAIN = 0, DATA_VAL = 1 } data_split;

typedef struct data_loader data_loader;

/* Open one split of the job's data. On error returns NULL and writes one line
 * "PATH: what (why)" to err (missing file, truncated, wrong magic, token id out
 * of the model's vocab, image size not the model's, ...). */
data_loader *data_open(const job_spec *job, data_split split, char *err, size_t errlen);
void data_close(data_loader *d);

/* Distinct samples in the split. ViT: images. GPT training: window offsets,
 * tokens - seq_len; GPT validation: non-overlapping windows,
 * (tokens - 1) / seq_len, so ceil(count / global_batch) batches cover it. */
long data_count(const data_loader *d);
/* The split's length: tokens (GPT; validation windows use count * seq_len + 1
 * of them, the rest is a tail shorter than a window) or images (ViT). */
long data_span(const data_loader *d);

/* Fill samples [begin, begin + count) of the global batch of step `step`.
 * GPT: tokens and targets [count, seq_len]; ViT: images [count, ch, S, S]
 * normalised floats and labels [count]. Unused outputs may be NULL.
 * Reentrant: ranks, threads and loaders may call it concurrently. */
void data_batch(data_loader *d, long step, int begin, int count,
                int *tokens, int *targets, float *images, int *labels);

/* A data file truncated or rewritten in place while the run reads it: the read
 * that hits its lost pages (SIGBUS) is caught, the batch gets samples the loss
 * ignores, and from then on this returns 1 with one line in msg ("PATH: the
 * data file changed while the run read it: N bytes when opened, M now ...").
 * 0 while every read succeeded. */
int data_fault(char *msg, size_t n);

#endif
