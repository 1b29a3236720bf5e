/* shard_writer.h — writes the token files dtrun's trainer reads (data.kind:
 * tokens, runtime/data/tokens.c): llm.c's shards (token_shard.h), a 1024-byte
 * header of 256 little-endian int32 (magic, version, token count) then the ids,
 * uint16 (gpt-2 shards) or, for a vocabulary above 65536 ids, uint32 (llama-3
 * shards). A stream of tokens is cut into shards of at most `shard_tokens`,
 * named PREFIX_SPLIT_000000.bin, PREFIX_SPLIT_000001.bin, ... as llm.c's
 * fineweb.py names them. Each shard is written under a temporary name and
 * renamed when complete; abort removes every shard this writer made.
 *
 * SFT shards (sft_shard.h: instruction data for data.kind sft) are written
 * by the same writer opened with shard_writer_open_sft: whole samples
 * (shard_writer_put_sample), each with its loss mask; a shard ends before a
 * sample that would take it past shard_tokens, so a sample never straddles
 * two shards (one longer than shard_tokens has a shard of its own). */
#ifndef DTRUN_TEXT_SHARD_WRITER_H
#define DTRUN_TEXT_SHARD_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { SHARD_PATH_MAX = 4096, SHARD_PREFIX_MAX = 4000 }; /* a prefix leaves room for "_train_000000.bin.tmp" */

typedef struct {
    char prefix[SHARD_PREFIX_MAX];
    const char *split;   /* "train" or "val" */
    long shard_tokens;   /* tokens per shard at most */
    int32_t magic, version; /* every shard's (token_shard_format_for) */
    int width;              /* bytes per id: 2 or 4 */
    int n_shards;        /* shards started so far */
    FILE *f;             /* the shard being written, NULL between shards */
    char tmp[SHARD_PATH_MAX + 8];
    long in_shard;       /* tokens in the open shard */
    long total;          /* tokens written, all shards */
    /* SFT shards only: the open shard's mask bytes and sample starts, written after its ids */
    int sft;
    unsigned char *mask;
    size_t mask_cap;
    int64_t *starts;
    size_t n_starts, starts_cap;
    long samples; /* all shards */
} shard_writer;

/* Starts shard 0 at once, so an unwritable output is found before any work.
 * n_ids: the vocabulary's ids (every id is below it), which picks the kind
 * (token_shard_format_for). 0, or -1 with err ("PATH: cannot write (why)"). */
int shard_writer_open(shard_writer *w, const char *prefix, const char *split, long shard_tokens, long n_ids,
                      char *err, size_t errlen);
/* The same for SFT shards (sft_shard.h), their width chosen from n_ids. */
int shard_writer_open_sft(shard_writer *w, const char *prefix, const char *split, long shard_tokens, long n_ids,
                          char *err, size_t errlen);
/* Appends one sample of an SFT shard: n ids and their mask bytes (0/1). */
int shard_writer_put_sample(shard_writer *w, const uint32_t *ids, const unsigned char *mask, size_t n, char *err,
                            size_t errlen);
/* Appends ids (each below the n_ids given to open; not to SFT shards). 0, or -1 with err. */
int shard_writer_put(shard_writer *w, const uint32_t *ids, size_t n, char *err, size_t errlen);
/* Completes the open shard. 0, or -1 with err. */
int shard_writer_close(shard_writer *w, char *err, size_t errlen);
/* Removes every shard this writer made, complete or not. */
void shard_writer_abort(shard_writer *w);
/* The path of shard i. */
void shard_writer_path(const shard_writer *w, int i, char *out, size_t cap);

#endif
