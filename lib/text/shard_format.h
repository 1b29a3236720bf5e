/* shard_format.h — llm.c's token shards, the files `dtrun tokenize` writes and
 * `data.kind: tokens` reads: a 1024-byte header of 256 little-endian int32
 * (magic, version, token count, then zeros) followed by `count` token ids.
 * llm.c (dev/data/data_common.py) has two kinds:
 *
 *   gpt-2    magic 20240520, version 1, uint16 ids (vocabularies up to 65536)
 *   llama-3  magic 20240801, version 7, uint32 ids (Llama 3's 128256 and up)
 *
 * One header parser serves every reader (the data loader, eval's sniffing of
 * a --data file, the checks made before workers start), so all of them accept
 * both kinds and say the same thing about a bad header. */
#ifndef DTRUN_TEXT_SHARD_FORMAT_H
#define DTRUN_TEXT_SHARD_FORMAT_H

#include <stddef.h>
#include <stdint.h>

enum { SHARD_HEADER_BYTES = 1024, SHARD_HEADER_INTS = 256 };
enum { SHARD_MAGIC_GPT2 = 20240520, SHARD_VERSION_GPT2 = 1 };
enum { SHARD_MAGIC_LLAMA3 = 20240801, SHARD_VERSION_LLAMA3 = 7 };

typedef struct {
    int32_t magic, version;
    int id_bytes;  /* 2 (uint16) or 4 (uint32) */
    int32_t count; /* token ids after the header */
} shard_header;

/* The kind that holds ids below n_ids: gpt-2's uint16 when n_ids <= 65536,
 * else llama-3's uint32. */
void shard_header_for(long n_ids, shard_header *h);

/* Whether the first 4 bytes of a file are one of the two magics. */
int shard_magic_known(const unsigned char *first4);

/* Checks a shard's header (its first `have` bytes, at least the header) and
 * the file's size `file_len` against it. 0 with *h, or -1 with err, which
 * follows "PATH: " in the caller's line: "wrong magic (...)", "unsupported
 * version (...)", "truncated (...)", ... */
int shard_header_parse(const unsigned char *bytes, size_t have, size_t file_len, shard_header *h, char *err,
                       size_t errlen);

/* Fills the 1024-byte header for h (count included). */
void shard_header_write(const shard_header *h, unsigned char out[SHARD_HEADER_BYTES]);

/* Token id i of a shard's ids (just past the header) of width id_bytes. */
static inline uint32_t shard_id_at(const unsigned char *ids, int id_bytes, long i)
{
    return id_bytes == 2 ? ((const uint16_t *)(const void *)ids)[i] : ((const uint32_t *)(const void *)ids)[i];
}

#endif
