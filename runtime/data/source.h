/* source.h — private to runtime/data: the kinds of sample source that the
 * loader (data.c) cuts batches from (token streams, images, and packed
 * instruction samples, sft.c).
 *
 * A token source is a read-only stream of token ids (byte-level text, llm.c
 * shards, or the synthetic Markov stream); GPT windows are cut from it. An image
 * source is an indexed set of labelled images (IDX files or synthetic patterns).
 * Sources know nothing about steps, ranks or splits: data.c maps (seed, step,
 * sample) to a position and a split to a range [lo, hi) of the source, so every
 * kind gets the same layout-independent indexing.
 *
 * Each implementation embeds the struct as its first member and frees itself in
 * close(). Open functions return NULL and write "PATH: what (why)" on error. */
#ifndef DTRUN_DATA_SOURCE_H
#define DTRUN_DATA_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include "lib/job/jobspec.h"

typedef struct token_source token_source;
struct token_source {
    long n; /* tokens in the stream */
    /* out[i] = token at pos + i for i < count; [pos, pos + count) within [0, n). */
    void (*read)(const token_source *s, long pos, int count, int *out);
    /* The file that holds stream position pos, *at its token index in that file
     * (from its first token, after any header), for messages; NULL when the
     * source has no file. */
    const char *(*locate)(const token_source *s, long pos, long *at);
    void (*close)(token_source *s);
};

typedef struct image_source image_source;
struct image_source {
    long n;       /* images */
    int channels; /* of every image */
    int size;     /* square side in pixels */
    /* Image i as normalised floats [channels, size, size] (pixels may be NULL)
     * and its label (label may be NULL). */
    void (*read)(const image_source *s, long i, float *pixels, int *label);
    void (*close)(image_source *s);
};

/* mapped_file.c: a whole regular file, mmapped read-only. An empty file is
 * not an error here (bytes NULL, len 0): callers say what "empty" means. */
typedef struct {
    const unsigned char *bytes;
    size_t len;
} mapped_file;
int mapped_file_open(mapped_file *m, const char *path, char *err, size_t errlen);
void mapped_file_close(mapped_file *m);

/* A file truncated while mapped makes a read of its lost pages raise SIGBUS.
 * Reads that may touch a mapping run between mapped_guard_begin() (a
 * sigsetjmp point: it returns 0, and 1 again when such a read faulted) and
 * mapped_guard_end(); after a fault, mapped_guard_describe() says which file
 * and its size when mapped and now. Outside a guard SIGBUS keeps its default
 * action. Per thread; the handler is installed once. */
#include <setjmp.h>
extern _Thread_local sigjmp_buf mapped_guard_jmp;
void mapped_guard_arm(void);
#define mapped_guard_begin() (mapped_guard_arm(), sigsetjmp(mapped_guard_jmp, 1))
void mapped_guard_end(void);
void mapped_guard_describe(char *msg, size_t n);

/* Whether a mapped file changed in place since it was mapped: the file at its
 * path is the same inode (device + inode) and its size, mtime or ctime
 * differ. Then 1, with one line in msg ("PATH: the data file changed while the
 * run read it: ..."). A file removed or replaced under its name (renamed over)
 * is no change: the mapping keeps reading the file it opened. One stat(2) per
 * mapped file. */
int mapped_changed(char *msg, size_t n);

/* The first of ids[0..n) outside [0, vocab), or -1: every batch's tokens pass
 * here where the loader makes them (data.c), whatever the width the file
 * stores them in. */
long data_first_bad_id(const int *ids, long n, int vocab);

/* text.c: any file as bytes (token id = byte value), mmapped. Bytes >= vocab
 * are an error. */
token_source *text_open(const char *path, int vocab, char *err, size_t errlen);

/* tokens.c: llm.c shards; `pattern` may be a glob, its matches are concatenated
 * in sorted order. Headers only: ids are checked per batch (data.c). */
token_source *tokens_open(const char *pattern, char *err, size_t errlen);

/* idx.c: IDX images + labels (plain or gzip), checked against the model's image
 * size, channels (1) and number of classes. */
image_source *idx_open(const char *images_path, const char *labels_path,
                       const job_model *model, char *err, size_t errlen);
/* The same checks of both headers only (magic, image size vs the model, label
 * count): the images and labels are not read. */
int idx_check_headers(const char *images_path, const char *labels_path, const job_model *model, char *err,
                      size_t errlen);

/* sft.c: instruction data, SFT shards (lib/text/sft_shard.h; `pattern` may be
 * a glob, its matches' samples taken in sorted order), each shard checked
 * whole at open. A sample longer than seq_len is an error naming it, or with
 * `truncate` its first seq_len tokens. sft_pack then packs samples [lo, hi)
 * into windows of seq_len rows (first fit, in order); window w's rows give
 * per token the input id, the target (-1: its mask byte 0, or across a
 * sample boundary, or padding), the position in its sample and the sample's
 * index in the window (the padding after the last sample is one more), any
 * output NULL to skip it. sft_window_targets: window w's targets >= 0.
 * sft_locate: the file holding row t of window w, *at its token index there
 * (NULL for padding). */
typedef struct sft_source sft_source;
sft_source *sft_open(const char *pattern, int seq_len, int truncate, char *err, size_t errlen);
long sft_samples(const sft_source *s);
int sft_pack(sft_source *s, long lo, long hi, char *err, size_t errlen);
long sft_windows(const sft_source *s);
long sft_window_targets(const sft_source *s, long w);
void sft_window(const sft_source *s, long w, int *tok, int *tgt, int *pos, int *seg);
const char *sft_locate(const sft_source *s, long w, int t, long *at);
void sft_close(sft_source *s);

/* synthetic.c: learnable, deterministic data of job->data.synthetic_size tokens
 * (GPT) or images (ViT), keyed by job->train.seed. */
token_source *synthetic_tokens_open(const job_spec *job, char *err, size_t errlen);
image_source *synthetic_images_open(const job_spec *job, char *err, size_t errlen);

/* Printf into err (when non-NULL); returns NULL so open functions can
 * `return data_fail(...)`. */
void *data_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
