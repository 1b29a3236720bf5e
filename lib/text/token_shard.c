/* token_shard.c — see token_shard.h. */
#include "lib/text/token_shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util/errline.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are little-endian");

/* The formats a reader accepts: a new one is a row here (and its width in the
 * reader). */
static const struct {
    int32_t magic, version;
    int width;
    const char *tokens; /* for messages */
} formats[] = {
    {TOKEN_SHARD_MAGIC, TOKEN_SHARD_VERSION, 2, "uint16 tokens"},
    {TOKEN_SHARD_MAGIC_LLAMA3, TOKEN_SHARD_VERSION_LLAMA3, 4, "uint32 tokens"},
};
enum { N_FORMATS = sizeof formats / sizeof formats[0] };

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

void token_shard_format_for(long n_ids, int32_t *magic, int32_t *version, int *width)
{
    int wide = n_ids > 65536;
    *magic = wide ? TOKEN_SHARD_MAGIC_LLAMA3 : TOKEN_SHARD_MAGIC;
    *version = wide ? TOKEN_SHARD_VERSION_LLAMA3 : TOKEN_SHARD_VERSION;
    *width = wide ? 4 : 2;
}

int token_shard_magic_known(const unsigned char *first4)
{
    int32_t magic = le32(first4);
    for (int i = 0; i < N_FORMATS; i++)
        if (formats[i].magic == magic) return 1;
    return 0;
}

/* "20240520" or "20240520 or 20240801": the magics a reader knows. */
static void known_magics(char *out, size_t n)
{
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < N_FORMATS && used < n; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= formats[j].magic == formats[i].magic;
        if (!seen) used += (size_t)snprintf(out + used, n - used, "%s%d", used ? " or " : "", formats[i].magic);
    }
}

int token_shard_check(const unsigned char *head, size_t have, unsigned long long size, const char *path,
                      token_shard_info *info, char *err, size_t errlen)
{
    if (size == 0)
        return errline(err, errlen, "%s: empty file (an llm.c token shard starts with a %d-byte header)", path,
                       TOKEN_SHARD_HEADER_BYTES);
    int32_t magic = have >= 4 ? le32(head) : 0;
    int known = -1, magic_known = 0;
    for (int i = 0; i < N_FORMATS; i++) magic_known |= formats[i].magic == magic;
    char magics[64];
    known_magics(magics, sizeof magics);
    if (have >= 4 && !magic_known) /* before its size: a short PNG is no shard, not a truncated one */
        return errline(err, errlen, "%s: wrong magic (%d, expected %s: not an llm.c token shard)", path, magic,
                       magics);
    if (size < TOKEN_SHARD_HEADER_BYTES || have < 12)
        return errline(err, errlen, "%s: truncated (%llu bytes, shorter than the %d-byte header)", path, size,
                       TOKEN_SHARD_HEADER_BYTES);
    int32_t version = le32(head + 4), count = le32(head + 8);
    for (int i = 0; i < N_FORMATS; i++)
        if (formats[i].magic == magic && formats[i].version == version) known = i;
    if (known < 0) {
        char which[256] = "";
        size_t used = 0;
        for (int i = 0; i < N_FORMATS && used < sizeof which; i++)
            if (formats[i].magic == magic)
                used += (size_t)snprintf(which + used, sizeof which - used, "%sversion %d has %s", used ? ", " : "",
                                         formats[i].version, formats[i].tokens);
        return errline(err, errlen, "%s: unsupported version (%d, only %s)", path, version, which);
    }
    if (count < 0) return errline(err, errlen, "%s: bad header (negative token count %d)", path, count);
    unsigned long long want = TOKEN_SHARD_HEADER_BYTES + (unsigned long long)formats[known].width * (unsigned)count;
    if (size != want)
        return errline(err, errlen, "%s: %s (header says %d tokens = %llu bytes, file has %llu bytes)", path,
                       size < want ? "truncated" : "longer than its header says", count, want, size);
    info->count = count;
    info->width = formats[known].width;
    return 0;
}

int token_shard_check_file(const char *path, token_shard_info *info, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errline(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return errline(err, errlen, "%s: cannot stat (%s)", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return errline(err, errlen, "%s: not a regular file (%s)", path,
                       S_ISDIR(st.st_mode) ? "it is a directory" : "a token shard is a file");
    }
    unsigned char head[TOKEN_SHARD_HEADER_BYTES];
    ssize_t got = pread(fd, head, sizeof head, 0);
    int e = errno;
    close(fd);
    if (got < 0) return errline(err, errlen, "%s: cannot read (%s)", path, strerror(e));
    return token_shard_check(head, (size_t)got, (unsigned long long)st.st_size, path, info, err, errlen);
}
