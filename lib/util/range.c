#include "lib/util/range.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/errline.h"

int range_parse_long(const char *s, long lo, long hi, long *out, char *why, size_t whylen)
{
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno == ERANGE || isspace((unsigned char)*s))
        return errline(why, whylen, "'%s' is not a whole number", s);
    if (v < lo || v > hi) return errline(why, whylen, "%ld is out of range (%ld..%ld)", v, lo, hi);
    *out = v;
    return 0;
}

int range_parse(const char *s, int lo, int hi, int *min, int *max, char *why, size_t whylen)
{
    long a, b;
    const char *colon = strchr(s, ':');
    if (!colon) {
        if (range_parse_long(s, lo, hi, &a, why, whylen)) return RANGE_BAD_NUMBER;
        *min = *max = (int)a;
        return RANGE_OK;
    }
    char first[32];
    size_t n = (size_t)(colon - s);
    if (n == 0 || n >= sizeof first) return RANGE_BAD_FORM;
    memcpy(first, s, n);
    first[n] = 0;
    if (range_parse_long(first, lo, hi, &a, why, whylen) || range_parse_long(colon + 1, lo, hi, &b, why, whylen))
        return RANGE_BAD_NUMBER;
    *min = (int)a;
    *max = (int)b;
    return a > b ? RANGE_MIN_OVER_MAX : RANGE_OK;
}
