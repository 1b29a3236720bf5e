/* account.c — see account.h. */
#include "runtime/parallel/account.h"

#include <stdlib.h>

struct account {
    long long cur[ACCT_COUNT];
    size_t peak[ACCT_COUNT];
    size_t peak_total;
};

account *acct_create(void) { return calloc(1, sizeof(account)); }

void acct_destroy(account *a) { free(a); }

static size_t total_now(const account *a)
{
    long long t = 0;
    for (int c = 0; c < ACCT_COUNT; c++)
        if (c != ACCT_HOST) t += a->cur[c];
    return t > 0 ? (size_t)t : 0;
}

void acct_add(account *a, acct_category c, long long bytes)
{
    if (!a || c < 0 || c >= ACCT_COUNT) return;
    a->cur[c] += bytes;
    if (a->cur[c] > 0 && (size_t)a->cur[c] > a->peak[c]) a->peak[c] = (size_t)a->cur[c];
    size_t t = total_now(a);
    if (t > a->peak_total) a->peak_total = t;
}

size_t acct_current(const account *a, acct_category c)
{
    return a->cur[c] > 0 ? (size_t)a->cur[c] : 0;
}

size_t acct_peak(const account *a, acct_category c) { return a->peak[c]; }

size_t acct_peak_total(const account *a) { return a->peak_total; }

void acct_reset_peaks(account *a)
{
    for (int c = 0; c < ACCT_COUNT; c++) a->peak[c] = acct_current(a, c);
    a->peak_total = total_now(a);
}

const char *acct_category_name(acct_category c)
{
    static const char *const names[ACCT_COUNT] = {"params", "grads", "optimizer", "activations",
                                                  "buffers", "master", "host"};
    return c >= 0 && c < ACCT_COUNT ? names[c] : "?";
}
