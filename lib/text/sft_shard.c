/* sft_shard.c — see sft_shard.h. */
#include "lib/text/sft_shard.h"

#include <string.h>

#include "lib/text/token_shard.h"
#include "lib/util/errline.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "SFT shards are little-endian");

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

unsigned long long sft_shard_size(long tokens, long samples, int width)
{
    return TOKEN_SHARD_HEADER_BYTES + (unsigned long long)tokens * (unsigned)(width + 1) +
           ((unsigned long long)samples + 1) * 8;
}

int sft_shard_check(const unsigned char *head, size_t have, unsigned long long size, const char *path,
                    sft_shard_info *info, char *err, size_t errlen)
{
    if (size == 0) return errline(err, errlen, "%s: empty file (an SFT shard starts with a 1024-byte header)", path);
    if (have >= 4 && le32(head) != SFT_SHARD_MAGIC)
        return errline(err, errlen, "%s: wrong magic (%d, expected %d: not an SFT shard of dtrun tokenize)", path,
                       le32(head), SFT_SHARD_MAGIC);
    if (size < TOKEN_SHARD_HEADER_BYTES || have < 20)
        return errline(err, errlen, "%s: truncated (%llu bytes, shorter than the 1024-byte header)", path, size);
    int32_t version = le32(head + 4), n = le32(head + 8), s = le32(head + 12), width = le32(head + 16);
    if (version != SFT_SHARD_VERSION)
        return errline(err, errlen, "%s: unsupported version (%d, only %d)", path, version, SFT_SHARD_VERSION);
    if (width != 2 && width != 4)
        return errline(err, errlen, "%s: bad header (id width %d, want 2 or 4)", path, width);
    if (n < 0 || s < 0 || s > n || (n > 0 && s == 0))
        return errline(err, errlen, "%s: bad header (%d tokens in %d samples)", path, n, s);
    unsigned long long want = sft_shard_size(n, s, width);
    if (size != want)
        return errline(err, errlen, "%s: %s (header says %d tokens, %d samples = %llu bytes, file has %llu bytes)",
                       path, size < want ? "truncated" : "longer than its header says", n, s, want, size);
    *info = (sft_shard_info){.tokens = n, .samples = s, .width = width, .ids_at = TOKEN_SHARD_HEADER_BYTES};
    info->mask_at = info->ids_at + (size_t)n * (size_t)width;
    info->starts_at = info->mask_at + (size_t)n;
    return 0;
}

int sft_shard_check_body(const unsigned char *file, const sft_shard_info *info, const char *path, char *err,
                         size_t errlen)
{
    const unsigned char *mask = file + info->mask_at;
    int64_t prev = -1;
    for (long s = 0; s <= info->samples; s++) {
        int64_t at;
        memcpy(&at, file + info->starts_at + 8 * (size_t)s, 8);
        int64_t want_first = s == 0 ? 0 : -1, want_last = s == info->samples ? info->tokens : -1;
        if ((want_first >= 0 && at != want_first) || (want_last >= 0 && at != want_last) || at <= prev ||
            at > info->tokens)
            return errline(err, errlen,
                           "%s: sample start %ld is %lld (starts go from 0 to %ld tokens, strictly increasing)", path,
                           s, (long long)at, info->tokens);
        if (s < info->samples && mask[at])
            return errline(err, errlen, "%s: sample %ld: its first token (%lld) has mask 1 (nothing predicts it)",
                           path, s, (long long)at);
        prev = at;
    }
    for (long i = 0; i < info->tokens; i++)
        if (mask[i] > 1) return errline(err, errlen, "%s: token %ld: mask byte %d (want 0 or 1)", path, i, mask[i]);
    return 0;
}
