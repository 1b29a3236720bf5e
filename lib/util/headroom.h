/* headroom.h — the memory `dtrun --plan` keeps free on each rank: a share of
 * the memory a rank has ("5%") or an amount ("4GiB", "512MB"), as --headroom
 * writes it. The hardware profile's headroom_percent is the default
 * (runtime/plan/hardware.h). */
#ifndef DTRUN_UTIL_HEADROOM_H
#define DTRUN_UTIL_HEADROOM_H

#include <stddef.h>

typedef struct {
    int set;         /* 0: none given (the profile's) */
    double fraction; /* of the memory a rank has, when bytes is 0 */
    double bytes;    /* an amount; 0: use fraction */
} dt_headroom;

/* "N%" (0 <= N < 100) or a number with a unit: B, kB, MB, GB, TB (powers of
 * 1000) or KiB, MiB, GiB, TiB (of 1024), e.g. "4GiB", "2.5 GB". A bare number
 * is refused: it could mean either. 0, or -1 with why (not naming the option). */
int headroom_parse(const char *s, dt_headroom *out, char *why, size_t whylen);

#endif
