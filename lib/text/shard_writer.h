/* shard_writer.h — writes the token files dtrun's trainer reads (data.kind:
 * tokens, runtime/data/tokens.c): llm.c's shards, a 1024-byte header of 256
 * little-endian int32 (magic 20240520, version 1, token count) then the tokens
 * as uint16. A stream of tokens is cut into shards of at most `shard_tokens`,
 * named PREFIX_SPLIT_000000.bin, PREFIX_SPLIT_000001.bin, ... as llm.c's
 * fineweb.py names them. Each shard is written under a temporary name and
 * renamed when complete; abort removes every shard this writer made. */
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
    int n_shards;        /* shards started so far */
    FILE *f;             /* the shard being written, NULL between shards */
    char tmp[SHARD_PATH_MAX + 8];
    long in_shard;       /* tokens in the open shard */
    long total;          /* tokens written, all shards */
} shard_writer;

/* Starts shard 0 at once, so an unwritable output is found before any work.
 * 0, or -1 with err ("PATH: cannot write (why)"). */
int shard_writer_open(shard_writer *w, const char *prefix, const char *split, long shard_tokens, char *err,
                      size_t errlen);
/* Appends ids (each < 65536). 0, or -1 with err. */
int shard_writer_put(shard_writer *w, const uint32_t *ids, size_t n, char *err, size_t errlen);
/* Completes the open shard. 0, or -1 with err. */
int shard_writer_close(shard_writer *w, char *err, size_t errlen);
/* Removes every shard this writer made, complete or not. */
void shard_writer_abort(shard_writer *w);
/* The path of shard i. */
void shard_writer_path(const shard_writer *w, int i, char *out, size_t cap);

#endif
