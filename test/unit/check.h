/* check.h — the unit tests' tiny harness. Each check prints "ok - what" or
 * "not ok - what: detail"; test/run.sh counts the lines. A test binary exits 1
 * when any check failed. */
#ifndef DTRUN_CHECK_H
#define DTRUN_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failed_count;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            printf("ok - ");                                                   \
        } else {                                                               \
            printf("not ok - %s:%d: ", __FILE__, __LINE__);                    \
            check_failed_count++;                                              \
        }                                                                      \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
        fflush(stdout);                                                        \
    } while (0)

#define CHECK_DONE() return check_failed_count ? 1 : 0

#endif
