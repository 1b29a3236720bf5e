/* unicode_class.c — see unicode_class.h. ASCII from a 128-entry table, the
 * rest by binary search over the generated ranges (~800 of them). */
#include "lib/text/unicode_class.h"

typedef struct {
    uint32_t first, last;
    unsigned char cls;
} class_range;

static const class_range RANGES[] = {
#include "lib/text/unicode_classes.inc"
};

enum { N_RANGES = sizeof RANGES / sizeof RANGES[0] };

static unicode_class slow_class(uint32_t cp)
{
    int lo = 0, hi = N_RANGES - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < RANGES[mid].first) hi = mid - 1;
        else if (cp > RANGES[mid].last) lo = mid + 1;
        else return (unicode_class)RANGES[mid].cls;
    }
    return UC_OTHER;
}

/* Filled on first use from the same ranges, so ASCII can never disagree. */
static unsigned char ascii_class[128];
static int ascii_ready;

unicode_class unicode_class_of(uint32_t cp)
{
    if (cp < 128) {
        if (!__atomic_load_n(&ascii_ready, __ATOMIC_ACQUIRE)) {
            /* Idempotent: racing threads write the same bytes. */
            for (uint32_t c = 0; c < 128; c++)
                __atomic_store_n(&ascii_class[c], (unsigned char)slow_class(c), __ATOMIC_RELAXED);
            __atomic_store_n(&ascii_ready, 1, __ATOMIC_RELEASE);
        }
        return (unicode_class)__atomic_load_n(&ascii_class[cp], __ATOMIC_RELAXED);
    }
    return slow_class(cp);
}

const char *unicode_class_version(void)
{
    return UNICODE_VERSION_OF_TABLE;
}
