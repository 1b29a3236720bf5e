/* sft_shard.h — dtrun's SFT shards: instruction data with its loss mask and
 * sample boundaries, as `dtrun tokenize` writes it (shard_writer.h) and
 * data.kind sft reads it; one definition of the layout for both
 * (man dtrun-job(5), "SFT shards"). An extension of llm.c's token shards:
 *
 *   header  256 little-endian int32 (1024 bytes): [0] magic 20261128,
 *           [1] version 1, [2] N tokens, [3] S samples, [4] id width in
 *           bytes (2 when every id < 65536, else 4), [5..255] 0
 *   ids     N token ids, uint16 or uint32 as [4] says
 *   mask    N bytes: 1 when the loss counts the prediction of token i from
 *           the tokens before it in its sample, else 0 (always 0 for a
 *           sample's first token)
 *   starts  S + 1 int64: sample s is tokens [starts[s], starts[s+1]);
 *           starts[0] = 0, starts[S] = N, strictly increasing
 *
 * A sample never straddles two shards. */
#ifndef DTRUN_TEXT_SFT_SHARD_H
#define DTRUN_TEXT_SFT_SHARD_H

#include <stddef.h>
#include <stdint.h>

enum { SFT_SHARD_MAGIC = 20261128, SFT_SHARD_VERSION = 1 };

typedef struct {
    long tokens;  /* N */
    long samples; /* S */
    int width;    /* bytes per id */
    /* byte offsets in the file */
    size_t ids_at, mask_at, starts_at;
} sft_shard_info;

/* The file size a header promises: 1024 + N*width + N + (S+1)*8. */
unsigned long long sft_shard_size(long tokens, long samples, int width);

/* Checks an SFT shard from its first bytes (head, have of them: the 1024 of
 * the header at most are read) and its size: magic, version, width 2 or 4,
 * N >= S >= 0 (S >= 1 when N > 0), the size the header promises. 0 with
 * *info, or -1 with one line in err: "PATH: what (why)". */
int sft_shard_check(const unsigned char *head, size_t have, unsigned long long size, const char *path,
                    sft_shard_info *info, char *err, size_t errlen);

/* The body of a shard held in memory (file: its size bytes, already through
 * sft_shard_check): starts from 0 to N strictly increasing, mask bytes 0/1,
 * the first token of each sample masked out. 0, or -1 with err naming the
 * sample or token. (Ids against the model's vocabulary are the reader's.) */
int sft_shard_check_body(const unsigned char *file, const sft_shard_info *info, const char *path, char *err,
                         size_t errlen);

#endif
