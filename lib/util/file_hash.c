/* file_hash.c — see file_hash.h. */
#include "lib/util/file_hash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

int file_xxh3(const char *path, uint64_t *size, uint64_t *hash, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(e));
        errno = e;
        return -1;
    }
    XXH3_state_t *st = XXH3_createState();
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    int rc = -1, e = 0;
    if (!st || !buf || XXH3_64bits_reset(st) != XXH_OK) {
        e = ENOMEM;
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    uint64_t total = 0;
    for (;;) {
        ssize_t k = read(fd, buf, CHUNK);
        if (k < 0) {
            if (errno == EINTR) continue;
            e = errno;
            snprintf(err, errlen, "%s: read failed (%s)", path, strerror(e));
            goto out;
        }
        if (k == 0) break;
        XXH3_64bits_update(st, buf, (size_t)k);
        total += (uint64_t)k;
    }
    *size = total;
    *hash = XXH3_64bits_digest(st);
    rc = 0;
out:
    free(buf);
    XXH3_freeState(st);
    close(fd);
    errno = e;
    return rc;
}
