/* mapped_file.c — a whole regular file mmapped read-only (see source.h). Text
 * and token corpora can be far larger than memory; a mapping costs only the
 * pages that windows touch. */
#include "runtime/data/source.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int mapped_file_open(mapped_file *m, const char *path, char *err, size_t errlen)
{
    m->bytes = NULL;
    m->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        data_fail(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        data_fail(err, errlen, "%s: cannot stat (%s)", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        data_fail(err, errlen, "%s: not a regular file (%s)", path,
                  S_ISDIR(st.st_mode) ? "it is a directory" : "only regular files can be mapped");
        close(fd);
        return -1;
    }
    if (st.st_size == 0) { /* mmap refuses length 0; callers word "empty" themselves */
        close(fd);
        return 0;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) {
        data_fail(err, errlen, "%s: cannot mmap (%s)", path, strerror(map_errno));
        return -1;
    }
    m->bytes = map;
    m->len = (size_t)st.st_size;
    return 0;
}

void mapped_file_close(mapped_file *m)
{
    if (m->bytes)
        munmap((void *)m->bytes, m->len);
    m->bytes = NULL;
    m->len = 0;
}
