/* fuzz_hostlist.c — libFuzzer target for the Slurm hostlist parser. Checks
 * that parse and first agree, that every host is a bounded, valid name, and
 * that the count stays within the limit. Built by scripts/fuzz.sh hostlist. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/launch/hostlist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char spec[1024];
    if (size >= sizeof spec) return 0;
    memcpy(spec, data, size);
    spec[size] = '\0';
    char err1[512] = "", err2[512] = "", err3[512] = "", first[HOSTLIST_MAX_NAME + 1];
    long hosts = hostlist_size(spec, err3, sizeof err3);
    int rc = hostlist_first(spec, first, sizeof first, err2, sizeof err2);
    if (hosts < 0) {
        if (rc != -1 || strcmp(err3, err2) != 0 || !strstr(err3, "column ")) abort();
        return 0;
    }
    if (rc != 0 || hosts < 1 || hosts > HOSTLIST_MAX_HOSTS) abort();
    /* Expanding tens of thousands of hosts per input would starve the fuzzer;
     * the expansion code is the same for 4096 hosts as for 65536. */
    if (hosts > 4096) return 0;
    hostlist *hl = hostlist_parse(spec, err1, sizeof err1);
    if (!hl) abort();
    int n = hostlist_count(hl);
    if (n != hosts || strcmp(first, hostlist_get(hl, 0)) != 0) abort();
    for (int i = 0; i < n; i++) {
        const char *h = hostlist_get(hl, i);
        size_t len = strlen(h);
        if (len == 0 || len > HOSTLIST_MAX_NAME) abort();
        for (size_t k = 0; k < len; k++)
            if (!isalnum((unsigned char)h[k]) && !strchr("-._", h[k])) abort();
    }
    hostlist_free(hl);
    return 0;
}
