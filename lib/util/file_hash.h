/* file_hash.h — XXH3-64 of a file's content, read in 1 MiB chunks. */
#ifndef DTRUN_FILE_HASH_H
#define DTRUN_FILE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* 0 with *size and *hash; -1 with one line in err ("PATH: cannot open (...)",
 * "PATH: read failed (...)"); errno is the cause. */
int file_xxh3(const char *path, uint64_t *size, uint64_t *hash, char *err, size_t errlen);

#endif
