/* grow.h — the one way a byte buffer grows: doubling, so appending n bytes
 * costs O(n) over the buffer's life. */
#ifndef DTRUN_UTIL_GROW_H
#define DTRUN_UTIL_GROW_H

#include <stddef.h>

/* Room for `extra` more bytes after the first `len` of a byte buffer. bufp is
 * the address of the buffer's pointer (char * or uint8_t *, which C gives the
 * representation of void *), *cap its capacity. When there is no room, the
 * buffer is reallocated to the first doubling of *cap (of `first` when *cap is
 * 0) that fits. 0, or -1 when out of memory, with the buffer unchanged. */
int grow_bytes(void *bufp, size_t *cap, size_t len, size_t extra, size_t first);

#endif
