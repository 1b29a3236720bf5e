/* shard_format.c — see shard_format.h. */
#include "lib/text/shard_format.h"

#include <string.h>

#include "lib/util/errline.h"

/* llm.c writes the host's (little-endian) integers; ids are read in place. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are little-endian");

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

void shard_header_for(long n_ids, shard_header *h)
{
    int wide = n_ids > 65536;
    *h = (shard_header){.magic = wide ? SHARD_MAGIC_LLAMA3 : SHARD_MAGIC_GPT2,
                        .version = wide ? SHARD_VERSION_LLAMA3 : SHARD_VERSION_GPT2,
                        .id_bytes = wide ? 4 : 2};
}

int shard_magic_known(const unsigned char *first4)
{
    int32_t m = le32(first4);
    return m == SHARD_MAGIC_GPT2 || m == SHARD_MAGIC_LLAMA3;
}

int shard_header_parse(const unsigned char *bytes, size_t have, size_t file_len, shard_header *h, char *err,
                       size_t errlen)
{
    if (file_len == 0)
        return errline(err, errlen, "empty file (an llm.c token shard starts with a %d-byte header)",
                       SHARD_HEADER_BYTES);
    if (file_len < SHARD_HEADER_BYTES || have < SHARD_HEADER_BYTES)
        return errline(err, errlen, "truncated (%zu bytes, shorter than the %d-byte header)", file_len,
                       SHARD_HEADER_BYTES);
    *h = (shard_header){.magic = le32(bytes), .version = le32(bytes + 4), .count = le32(bytes + 8)};
    if (h->magic == SHARD_MAGIC_GPT2) {
        if (h->version != SHARD_VERSION_GPT2)
            return errline(err, errlen, "unsupported version (%d; magic %d is version %d, uint16 ids)", h->version,
                           SHARD_MAGIC_GPT2, SHARD_VERSION_GPT2);
        h->id_bytes = 2;
    } else if (h->magic == SHARD_MAGIC_LLAMA3) {
        if (h->version != SHARD_VERSION_LLAMA3)
            return errline(err, errlen, "unsupported version (%d; magic %d is version %d, uint32 ids)", h->version,
                           SHARD_MAGIC_LLAMA3, SHARD_VERSION_LLAMA3);
        h->id_bytes = 4;
    } else {
        return errline(err, errlen,
                       "wrong magic (%d, expected %d or %d: not an llm.c token shard)", h->magic, SHARD_MAGIC_GPT2,
                       SHARD_MAGIC_LLAMA3);
    }
    if (h->count < 0) return errline(err, errlen, "bad header (negative token count %d)", h->count);
    size_t want = SHARD_HEADER_BYTES + (size_t)h->id_bytes * (size_t)h->count;
    if (file_len != want)
        return errline(err, errlen, "%s (header says %d tokens = %zu bytes, file has %zu bytes)",
                       file_len < want ? "truncated" : "longer than its header says", h->count, want, file_len);
    return 0;
}

void shard_header_write(const shard_header *h, unsigned char out[SHARD_HEADER_BYTES])
{
    int32_t ints[SHARD_HEADER_INTS] = {h->magic, h->version, h->count};
    memcpy(out, ints, sizeof ints);
}
