/* kv_barrier — a tiny worker for the launcher's integration tests.
 *
 *   kv_barrier [NAME [TIMEOUT_S]]
 *
 * Connects to the KV store the agent advertises (DTRUN_KV_ENDPOINT, token,
 * prefix: lib/rdzv/kv.h), publishes its RANK, meets all WORLD_SIZE ranks at barrier
 * NAME, then checks that every rank 0..WORLD_SIZE-1 published: ranks are
 * unique and complete. Prints "kv_barrier: rank R of W passed NAME" and exits 0,
 * or one line and exit 1. Built by the tests: gcc ... build/libdtrun.a. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/rdzv/kv.h"

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "test";
    int timeout_ms = (int)(1000 * (argc > 2 ? atof(argv[2]) : 30));
    const char *rank_s = getenv("RANK"), *world_s = getenv("WORLD_SIZE");
    if (!rank_s || !world_s) {
        fprintf(stderr, "kv_barrier: RANK and WORLD_SIZE must be set\n");
        return 1;
    }
    int rank = atoi(rank_s), world = atoi(world_s);
    char err[512];
    kv_client *kv = kv_connect_env(err, sizeof err);
    if (!kv) {
        fprintf(stderr, "kv_barrier: %s\n", err);
        return 1;
    }
    char key[64], val[64];
    snprintf(key, sizeof key, "%s/rank/%d", name, rank);
    snprintf(val, sizeof val, "%ld", (long)getpid());
    int rc = kv_add(kv, key, 1, NULL);
    if (rc == KV_OK) rc = kv_barrier(kv, name, world, timeout_ms);
    for (int r = 0; r < world && rc == KV_OK; r++) {
        char got[32];
        snprintf(key, sizeof key, "%s/rank/%d", name, r);
        rc = kv_get_str(kv, key, got, sizeof got, 0);
        if (rc == KV_OK && strcmp(got, "1")) {
            fprintf(stderr, "kv_barrier: rank %d was claimed %s times\n", r, got);
            kv_close(kv);
            return 1;
        }
    }
    if (rc != KV_OK) {
        fprintf(stderr, "kv_barrier: rank %d: %s\n", rank, kv_errmsg(kv));
        kv_close(kv);
        return 1;
    }
    printf("kv_barrier: rank %d of %d passed %s\n", rank, world, name);
    kv_close(kv);
    return 0;
}
