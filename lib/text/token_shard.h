/* token_shard.h — the header of llm.c's token shards, one definition for the
 * writer (shard_writer.c), the trainer's reader (runtime/data/tokens.c) and the
 * launcher's checks before it spawns (runtime/data/data_check.c).
 *
 * A shard is a header of 256 little-endian int32 (1024 bytes): magic, version,
 * token count; then `count` tokens of the version's width. Known formats (a
 * table in token_shard.c): magic 20240520 version 1, uint16 tokens (GPT-2's
 * vocabulary, what `dtrun tokenize` writes). The header names no vocabulary
 * size: token ids are checked against the model's where the trainer reads them. */
#ifndef DTRUN_TEXT_TOKEN_SHARD_H
#define DTRUN_TEXT_TOKEN_SHARD_H

#include <stddef.h>
#include <stdint.h>

enum { TOKEN_SHARD_HEADER_BYTES = 1024, TOKEN_SHARD_HEADER_INTS = 256 };
enum { TOKEN_SHARD_MAGIC = 20240520, TOKEN_SHARD_VERSION = 1 }; /* what the writer writes */

typedef struct {
    long count; /* tokens after the header */
    int width;  /* bytes per token */
} token_shard_info;

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
