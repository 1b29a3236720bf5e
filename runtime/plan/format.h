/* format.h — numbers for people: bytes, seconds, counts, in a fixed width or not.
 * Decimal prefixes throughout (GB = 1e9 bytes), as the figures and GPU
 * marketing use them; the report says so once. Each writes into buf and returns it. */
#ifndef DTRUN_PLAN_FORMAT_H
#define DTRUN_PLAN_FORMAT_H

#include <stddef.h>

#define FMT_LEN 32

char *fmt_bytes(char buf[FMT_LEN], double bytes);   /* "208 GB", "12.3 MB", "0 B" */
char *fmt_seconds(char buf[FMT_LEN], double s);     /* "1.23 s", "45.6 ms", "789 us" */
char *fmt_count(char buf[FMT_LEN], double x);       /* "13.1 G", "512 k", "17" */

#endif
