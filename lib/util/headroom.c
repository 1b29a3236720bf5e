/* headroom.c — see headroom.h. */
#include "lib/util/headroom.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/errline.h"

int headroom_parse(const char *s, dt_headroom *out, char *why, size_t whylen)
{
    static const struct {
        const char *unit;
        double scale;
    } UNITS[] = {{"B", 1},       {"kB", 1e3},          {"KB", 1e3},          {"MB", 1e6},
                 {"GB", 1e9},    {"TB", 1e12},         {"KiB", 1024.0},      {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || isspace((unsigned char)*s) || end == s || errno == ERANGE || !isfinite(v) || v < 0)
        return errline(why, whylen, "'%s' is not a share of memory (5%%) or an amount (4GiB, 512MB)", s);
    while (*end == ' ') end++;
    if (!strcmp(end, "%")) {
        if (v >= 100) return errline(why, whylen, "'%s': a share of memory below 100%%", s);
        *out = (dt_headroom){1, v / 100.0, 0};
        return 0;
    }
    if (!*end)
        return errline(why, whylen, "'%s' needs a unit: '%s%%' of each rank's memory, or an amount like '%sGiB'", s, s,
                       s);
    for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++)
        if (!strcmp(end, UNITS[i].unit)) {
            *out = (dt_headroom){1, 0, v * UNITS[i].scale};
            if (out->bytes == 0) out->fraction = 0; /* "0B": none kept */
            return 0;
        }
    return errline(why, whylen, "'%s': unknown unit '%s' (%%, B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)", s, end);
}
