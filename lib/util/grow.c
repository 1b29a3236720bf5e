#include "lib/util/grow.h"

#include <stdlib.h>
#include <string.h>

int grow_bytes(void *bufp, size_t *cap, size_t len, size_t extra, size_t first)
{
    if (*cap - len >= extra) return 0;
    size_t want = *cap ? *cap : first;
    while (want - len < extra) want *= 2;
    void *buf;
    memcpy(&buf, bufp, sizeof buf);
    void *p = realloc(buf, want);
    if (!p) return -1;
    memcpy(bufp, &p, sizeof p);
    *cap = want;
    return 0;
}
