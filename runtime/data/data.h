/* data.h — training and validation data, layout-independent.
 *
 * Sources: synthetic, byte-level text (any file), llm.c token shards (1024-byte
 * header of int32: magic, version, token count; then uint16 ids (gpt-2 shards)
 * or uint32 ids (llama-3 shards): lib/text/token_shard.h),
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
 *  - SFT (data.kind sft, instruction data): samples packed into windows of
 *    seq_len tokens (sft.c); position g walks a per-epoch permutation of the
 *    windows, as for images.
 * Validation batches (split DATA_VAL) walk the validation set in order from the
 * start, batch k = samples [k * global_batch, ...) wrapping around; GPT
 * validation windows tile the split with stride seq_len (no overlap).
 *
 * Splits: with data.val_path set, each split reads its own file (IDX labels:
 * data.train_labels / val_labels, or derived from the images' name by
 * replacing "images-idx3" with "labels-idx1"). Without it, validation is the
 * last data.val_fraction (0 means 0.1) of the train file — bytes, tokens or
 * images, or SFT samples — and training the rest. Synthetic data is a virtual file of
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

/* The job's data files by their headers only (cost independent of their size),
 * before any worker starts (runtime/train/preflight.c), in the loader's words:
 * tokens: every shard a path or glob names: magic, version, and a size of
 * exactly header + count x token width; text: not empty; IDX: the images' and
 * labels' magic, the image size against the model, as many labels as images.
 * Token shards name no vocabulary: their ids are checked per batch (data_fault).
 * 0, or -1 with one line "FILE:LINE:COL: data.train 'PATH': what (why)". What
 * only reading the data finds (ids, labels, a split too short) stays the
 * worker's. */
int data_check_files(const job_spec *job, char *err, size_t errlen);

typedef enum { DATA_TRAIN = 0, DATA_VAL = 1 } data_split;

typedef struct data_loader data_loader;

/* Open one split of the job's data. On error returns NULL and writes one line
 * "PATH: what (why)" to err (missing file, truncated, wrong magic, token id out
 * of the model's vocab, image size not the model's, ...). */
data_loader *data_open(const job_spec *job, data_split split, char *err, size_t errlen);
void data_close(data_loader *d);

/* Distinct samples in the split. ViT: images. GPT training: window offsets,
 * tokens - seq_len; GPT validation: non-overlapping windows,
 * (tokens - 1) / seq_len, so ceil(count / global_batch) batches cover it.
 * SFT: packed windows. */
long data_count(const data_loader *d);
/* The split's length: tokens (GPT; validation windows use count * seq_len + 1
 * of them, the rest is a tail shorter than a window), images (ViT) or
 * samples (SFT). */
long data_span(const data_loader *d);

/* Fill samples [begin, begin + count) of the global batch of step `step`.
 * GPT: tokens and targets [count, seq_len]; ViT: images [count, ch, S, S]
 * normalised floats and labels [count]. Unused outputs may be NULL.
 * Reentrant: ranks, threads and loaders may call it concurrently. */
void data_batch(data_loader *d, long step, int begin, int count,
                int *tokens, int *targets, float *images, int *labels);

/* Packed instruction data (data.kind sft): 1 when the loader's samples are
 * windows of packed samples, whose rows need data_batch_docs (the model's
 * document mask), else 0. */
int data_packed(const data_loader *d);
/* Samples [begin, begin + count) of the global batch of `step` as
 * data_batch cuts them, their rows' document structure, [count, seq_len]
 * each: the position of each token in its sample (0 at a sample's first
 * token) and its segment (the sample's index in its window; the padding
 * after the last sample is one more). Only for a packed loader. */
void data_batch_docs(data_loader *d, long step, int begin, int count, int *positions, int *segments);
/* The targets >= 0 (the tokens the loss counts) in those samples: what the
 * mean over a global batch divides by. Language models: packed windows
 * count their masked-in targets, windows of a token stream seq_len each. */
long data_batch_targets(const data_loader *d, long step, int begin, int count);

/* A data file that changed while the run reads it. Three checks, each ending
 * in one line in msg and a 1 from here (sticky: the first fault's line), 0
 * while nothing changed:
 *  - a read that hits a truncated file's lost pages (SIGBUS) is caught: "PATH:
 *    the data file changed while the run read it: N bytes when opened, M now ...";
 *  - every token id a batch reads is checked against model.vocab_size where
 *    the batch is made: "PATH: token id I at token P of the file is out of the
 *    model's vocabulary (model.vocab_size V)" (P counts the file's tokens from
 *    0, after a shard's header);
 *  - each call stats every mapped file: the same inode with another size,
 *    mtime or ctime was changed in place ("... rewritten in place ..."). A file
 *    removed or replaced under its name (a new file renamed over it) is no
 *    change: the run goes on reading the file it opened.
 * Either way the batch gets samples the loss ignores instead of the bad ones.
 * The trainer calls this after a step's batches were read and before its
 * update (train.c), so a step whose data changed is not applied. */
int data_fault(char *msg, size_t n);

#endif
