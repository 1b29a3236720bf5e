/* read_all.h — a whole file into memory, for the unit tests (NUL-terminated;
 * NULL when it cannot be read). */
#ifndef DTRUN_TEST_READ_ALL_H
#define DTRUN_TEST_READ_ALL_H

#include <stdio.h>
#include <stdlib.h>

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

#endif
