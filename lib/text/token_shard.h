/* token_shard.h — the header of llm.c's token shards, one definition for the
 * writer (shard_writer.c), the trainer's reader (runtime/data/tokens.c) and the
 * launcher's checks before it spawns (runtime/data/data_check.c).
 *
 * A shard is a header of 256 little-endian int32 (1024 bytes): magic, version,
 * token count; then `count` tokens of the version's width. Known formats (a
 * table in token_shard.c), llm.c's two (dev/data/data_common.py):
 *
 *   gpt-2    magic 20240520, version 1, uint16 tokens (vocabularies up to 65536)
 *   llama-3  magic 20240801, version 7, uint32 tokens (Llama 3's 128256, ...)
 *
 * `dtrun tokenize` writes the first that holds its tokenizer's ids. The header
 * names no vocabulary size: token ids are checked against the model's where
 * the trainer reads them. */
#ifndef DTRUN_TEXT_TOKEN_SHARD_H
#define DTRUN_TEXT_TOKEN_SHARD_H

#include <stddef.h>
#include <stdint.h>

enum { TOKEN_SHARD_HEADER_BYTES = 1024, TOKEN_SHARD_HEADER_INTS = 256 };
enum { TOKEN_SHARD_MAGIC = 20240520, TOKEN_SHARD_VERSION = 1 };               /* gpt-2 */
enum { TOKEN_SHARD_MAGIC_LLAMA3 = 20240801, TOKEN_SHARD_VERSION_LLAMA3 = 7 }; /* llama-3 */

typedef struct {
    long count; /* tokens after the header */
    int width;  /* bytes per token */
} token_shard_info;

/* The header's magic and version for shards of ids below n_ids (gpt-2's
 * uint16 up to 65536 ids, else llama-3's uint32), and the width. */
void token_shard_format_for(long n_ids, int32_t *magic, int32_t *version, int *width);

/* Whether a file's first 4 bytes are a known magic (telling token shards
 * from other data by their first bytes, as eval's --data does). */
int token_shard_magic_known(const unsigned char *first4);

/* Token i of a shard's ids (just past the header), `width` bytes each. */
static inline uint32_t token_shard_id(const unsigned char *ids, int width, long i)
{
    return width == 2 ? ((const uint16_t *)(const void *)ids)[i] : ((const uint32_t *)(const void *)ids)[i];
}

/* Checks a shard from its first bytes (head, have of them; at most the
 * header's 1024 are looked at) and its size in bytes: magic, version, and a
 * size of exactly header + count * width. 0 with *info filled, or -1 with one
 * line in err: "PATH: what (why)" (empty, truncated, wrong magic, unsupported
 * version, longer than its header says). */
int token_shard_check(const unsigned char *head, size_t have, unsigned long long size, const char *path,
                      token_shard_info *info, char *err, size_t errlen);

/* The same for the file at path, reading its header only (one read of 1024
 * bytes and an fstat, whatever the file's size). Also "cannot open" and "not a
 * regular file". */
int token_shard_check_file(const char *path, token_shard_info *info, char *err, size_t errlen);

#endif
