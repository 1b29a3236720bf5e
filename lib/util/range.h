/* range.h — the one parser of "N or MIN:MAX" (--nnodes, `dtrun rdzv --nnodes`,
 * the job's launch.nnodes) and of the whole numbers inside it.
 *
 * The status says what was wrong and `why` holds launch's wording of it; each
 * caller words its own message from them, so the three keep their texts. */
#ifndef DTRUN_UTIL_RANGE_H
#define DTRUN_UTIL_RANGE_H

#include <stddef.h>

typedef enum {
    RANGE_OK = 0,
    RANGE_BAD_NUMBER = -1,   /* N, MIN or MAX is not a whole number in [lo, hi]; why says which */
    RANGE_BAD_FORM = -2,     /* nothing (or more than 31 characters) before the ':' */
    RANGE_MIN_OVER_MAX = -3, /* both parsed, *min and *max are set, but MIN > MAX */
} range_status;

/* A whole number in [lo, hi]: decimal, an optional sign, no blank before it,
 * nothing after it. 0, or -1 with "'x' is not a whole number" or
 * "9 is out of range (1..8)" in why. */
int range_parse_long(const char *s, long lo, long hi, long *out, char *why, size_t whylen);

/* "N" (min = max = N) or "MIN:MAX", every number in [lo, hi]. RANGE_OK or the
 * status of the first thing wrong. */
int range_parse(const char *s, int lo, int hi, int *min, int *max, char *why, size_t whylen);

#endif
