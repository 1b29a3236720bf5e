/* format.c — human-readable numbers with three significant digits. */
#include "runtime/plan/format.h"

#include <math.h>
#include <stdio.h>

static char *scaled(char buf[FMT_LEN], double x, const char *unit, const char *const *prefix, int n)
{
    double a = fabs(x);
    int i = 0;
    while (i + 1 < n && a >= 999.5) a /= 1000.0, x /= 1000.0, i++;
    if (a == 0) snprintf(buf, FMT_LEN, "0 %s", unit);
    else snprintf(buf, FMT_LEN, "%.3g %s%s", x, prefix[i], unit);
    return buf;
}

char *fmt_bytes(char buf[FMT_LEN], double bytes)
{
    static const char *const p[] = {"", "k", "M", "G", "T", "P"};
    return scaled(buf, bytes, "B", p, 6);
}

char *fmt_count(char buf[FMT_LEN], double x)
{
    static const char *const p[] = {"", "k", "M", "G", "T", "P", "E"};
    char *s = scaled(buf, x, "", p, 7);
    /* "13.1 G" reads as a count; drop the trailing space of a plain number */
    size_t n = 0;
    while (s[n]) n++;
    if (n && s[n - 1] == ' ') s[n - 1] = 0;
    return s;
}

char *fmt_seconds(char buf[FMT_LEN], double s)
{
    double a = fabs(s);
    if (a == 0) snprintf(buf, FMT_LEN, "0 s");
    else if (a >= 1) snprintf(buf, FMT_LEN, "%.3g s", s);
    else if (a >= 1e-3) snprintf(buf, FMT_LEN, "%.3g ms", s * 1e3);
    else snprintf(buf, FMT_LEN, "%.3g us", s * 1e6);
    return buf;
}
