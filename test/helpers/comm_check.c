/* comm_check — a worker for test/integration/comm_netns.sh: the CPU transport
 * between real nodes (network namespaces), launched by bin/dtrun.
 *
 *   comm_check            every collective against a reference, then exit
 *   comm_check --loop S   all_reduce in a loop until it fails (the kill test)
 *
 * Bootstraps the world from the agent's environment (RANK, WORLD_SIZE,
 * GROUP_RANK and the KV store: DTRUN_KV_ENDPOINT, token, prefix), learns every
 * rank's node with an all_gather, then makes the node-local group and the
 * cross-node group of the ranks sharing its LOCAL_RANK.
 *
 * Default mode checks that the world and the cross-node group use "tcp" when
 * they span nodes and the local group "shm"; runs all_reduce (sum, avg, max,
 * out of and in place), reduce_scatter, all_gather, broadcast, barrier and
 * send / recv, blocking and asynchronous, f32 and bf16, counts 0, 7 and 1Mi+3
 * on the world (small counts on the groups), each against a reference it
 * computes itself; prints
 *   "comm_check: rank R of W passed: world tcp, local shm (2), cross tcp (3), N checks"
 * and exits 0, or prints each failure and exits 1 (2: could not start).
 *
 * --loop S: prints "comm_check: rank R looping", then all_reduces (SIGTERM
 * ignored) until a call fails; prints
 *   "comm_check: rank R failed after C calls; the failing call took T s (timeout X s): LINE"
 * and exits 3. No failure within S seconds: exit 0.
 * Built by the test: gcc ... build/libdtrun.a. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm/comm.h"
#include "runtime/comm/store.h"
#include "test/helpers/comm_data.h"

static int my_rank, fails, checks;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fail(const char *what, const char *detail)
{
    if (fails++ < 10)
        printf("comm_check: rank %d: FAIL %s: %s\n", my_rank, what, detail);
}

/* ---- data: test/helpers/comm_data.h, the scheme of test/unit/test_comm.c ---- */


/* Compares n elements of buf with want(i); one line for the first mismatch. */
#define EXPECT_ALL(label, n, dt, buf, want_expr)                                      \
    do {                                                                              \
        checks++;                                                                     \
        for (size_t i_ = 0; i_ < (n); i_++) {                                         \
            size_t i = i_;                                                            \
            float got_ = get(dt, buf, i_), want_ = (want_expr);                       \
            if (got_ != want_) {                                                      \
                char d_[200];                                                         \
                snprintf(d_, sizeof d_, "[%zu] = %g, want %g", i, got_, want_);       \
                fail(label, d_);                                                      \
                break;                                                                \
            }                                                                         \
        }                                                                             \
    } while (0)

static void expect_ok(comm *c, int rc, const char *label)
{
    if (rc != COMM_OK)
        fail(label, comm_last_error(c));
}

/* One round of every collective on c: all_reduce out of place and in place,
 * reduce_scatter, all_gather, broadcast, barrier, then send / recv around the
 * ring (asynchronous: all at once; blocking: in turn from rank 0). */
static void check_round(comm *c, size_t n, comm_dtype dt, comm_op op, int async, int salt)
{
    int p = comm_size(c), r = comm_rank(c);
    size_t es = comm_dtype_size(dt), off, len;
    comm_chunk(n, p, r, &off, &len);
    char label[200];
    snprintf(label, sizeof label, "%s n=%zu %s %s %s p=%d", comm_transport(c), n,
             dt == COMM_F32 ? "f32" : "bf16", op == COMM_SUM ? "sum" : op == COMM_AVG ? "avg" : "max",
             async ? "async" : "sync", p);
    uint32_t seed = mix((uint32_t)salt), ag_seed = mix((uint32_t)salt + 1000u),
             bc_seed = mix((uint32_t)salt + 2000u), p2p_seed = mix((uint32_t)salt + 3000u);
    char *in = malloc(n * es + 16), *out = malloc(n * es + 16), *inpl = malloc(n * es + 16);
    char *rs = malloc(len * es + 16), *mine = malloc(len * es + 16), *ag = malloc(n * es + 16);
    char *bc = malloc(n * es + 16), *tx = malloc(n * es + 16), *rx = malloc(n * es + 16);
    if (!in || !out || !inpl || !rs || !mine || !ag || !bc || !tx || !rx) {
        fail(label, "out of memory");
        goto done;
    }
    int root = (int)(n % (size_t)p);
    fill_seeded(dt, in, p, r, 0, n, seed);
    memcpy(inpl, in, n * es);
    fill_seeded(dt, mine, p, r, off, len, ag_seed);
    if (r == root)
        fill_seeded(dt, bc, p, root, 0, n, bc_seed);
    else
        memset(bc, 0x55, n * es);
    fill_seeded(dt, tx, p, r, 0, n, p2p_seed);

    int prev = (r + p - 1) % p, next = (r + 1) % p;
    comm_req *q[8] = {0};
    int rc[8] = {0}, nreq = p > 1 ? 8 : 6;   /* no send / recv with oneself */
    if (async) {
        rc[0] = comm_all_reduce_async(c, in, out, n, dt, op, &q[0]);
        rc[1] = comm_all_reduce_async(c, inpl, inpl, n, dt, op, &q[1]);
        rc[2] = comm_reduce_scatter_async(c, in, rs, n, dt, op, &q[2]);
        rc[3] = comm_all_gather_async(c, mine, ag, n, dt, &q[3]);
        rc[4] = comm_broadcast_async(c, bc, n, dt, root, &q[4]);
        rc[5] = comm_barrier_async(c, &q[5]);
    } else {
        rc[0] = comm_all_reduce(c, in, out, n, dt, op);
        rc[1] = comm_all_reduce(c, inpl, inpl, n, dt, op);
        rc[2] = comm_reduce_scatter(c, in, rs, n, dt, op);
        rc[3] = comm_all_gather(c, mine, ag, n, dt);
        rc[4] = comm_broadcast(c, bc, n, dt, root);
        rc[5] = comm_barrier(c);
    }
    if (p > 1 && async) {
        rc[6] = comm_send_async(c, tx, n, dt, next, &q[6]);
        rc[7] = comm_recv_async(c, rx, n, dt, prev, &q[7]);
    } else if (p > 1) {
        /* Blocking, so in turn: 0 sends first, everyone else receives first. */
        if (r == 0) {
            rc[6] = comm_send(c, tx, n, dt, next);
            rc[7] = comm_recv(c, rx, n, dt, prev);
        } else {
            rc[7] = comm_recv(c, rx, n, dt, prev);
            rc[6] = comm_send(c, tx, n, dt, next);
        }
    }
    for (int k = 0; k < nreq; k++) {
        int w = comm_wait(q[k]);
        expect_ok(c, rc[k] != COMM_OK ? rc[k] : w, label);
    }
    if (fails)
        goto done;
    EXPECT_ALL("all_reduce", n, dt, out, reference(dt, op, p, i, seed));
    EXPECT_ALL("all_reduce in place", n, dt, inpl, reference(dt, op, p, i, seed));
    EXPECT_ALL("reduce_scatter", len, dt, rs, reference(dt, op, p, off + i, seed));
    size_t chunk = (n + (size_t)p - 1) / (size_t)p;   /* comm_chunk's: rank i / chunk owns i */
    EXPECT_ALL("all_gather", n, dt, ag, value_at(dt, p, (int)(i / chunk), i, ag_seed));
    EXPECT_ALL("broadcast", n, dt, bc, value_at(dt, p, root, i, bc_seed));
    if (p > 1)
        EXPECT_ALL("recv from the previous rank", n, dt, rx, value_at(dt, p, prev, i, p2p_seed));
done:
    free(in), free(out), free(inpl), free(rs), free(mine), free(ag), free(bc), free(tx), free(rx);
}

/* Everyone calls the same rounds: count x dtype x {blocking, async}, the op
 * rotating sum, avg, max so each meets both dtypes and both forms. */
static void check_all(comm *c, const size_t *counts, int ncounts, int salt)
{
    int round = 0;
    for (int k = 0; k < ncounts; k++)
        for (int dt = 0; dt < 2; dt++)
            for (int async = 0; async < 2; async++, round++)
                check_round(c, counts[k], (comm_dtype)dt, (comm_op)(round % 3), async,
                            salt + round);
}

/* The kill test: all_reduce until a call fails, timing the failing call.
 * SIGTERM is ignored here: when a node dies, the survivors' agents learn it
 * from the rendezvous daemon at about the moment the survivors' sockets do, and
 * their stop signal would race (and hide) what this test is about, the
 * transport noticing on its own. The agent's SIGKILL after --term-timeout
 * still bounds a worker that never notices. */
static int loop(comm *w, double seconds)
{
    signal(SIGTERM, SIG_IGN);
    size_t n = 1 << 18;
    float *x = calloc(n, sizeof(float));
    if (!x)
        return 2;
    double start = now_s();
    long calls = 0;
    for (;;) {
        double t = now_s();
        int rc = comm_all_reduce(w, x, x, n, COMM_F32, COMM_SUM);
        if (rc == COMM_OK) {
            if (calls++ == 0)
                printf("comm_check: rank %d looping\n", my_rank);
            if (now_s() - start > seconds) {
                printf("comm_check: rank %d: no failure in %.0f s\n", my_rank, seconds);
                free(x);
                return 0;
            }
            continue;
        }
        printf("comm_check: rank %d failed after %ld calls; the failing call took %.2f s "
               "(timeout %.1f s): %s\n", my_rank, calls, now_s() - t, comm_timeout(w),
               comm_last_error(w));
        free(x);
        return 3;
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    double loop_s = argc > 2 && strcmp(argv[1], "--loop") == 0 ? atof(argv[2]) : 0;
    const char *lr = getenv("LOCAL_RANK"), *gr = getenv("GROUP_RANK");
    my_rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
    if (!lr || !gr) {
        printf("comm_check: LOCAL_RANK and GROUP_RANK must be set (run under dtrun)\n");
        return 2;
    }
    char err[600];
    comm_store *st = store_open_env(err, sizeof err);
    comm *w = NULL;
    if (!st || comm_world_init(&w, st, err, sizeof err) != COMM_OK) {
        printf("comm_check: rank %d: %s\n", my_rank, err);
        if (st)
            store_close(st);
        return 2;
    }
    if (loop_s > 0) {
        int rc = loop(w, loop_s);
        comm_destroy(w);
        store_close(st);
        return rc;
    }

    /* Who is where: (node, local rank) of every rank, gathered. */
    int p = comm_size(w), r = comm_rank(w);
    if (p > 64) {
        printf("comm_check: at most 64 ranks, not %d\n", p);
        return 2;
    }
    float me[2] = {(float)atoi(gr), (float)atoi(lr)}, *all = calloc((size_t)p * 2, sizeof(float));
    int local[64], nlocal = 0, cross[64], ncross = 0, nodes = 0;
    expect_ok(w, all ? comm_all_gather(w, me, all, (size_t)p * 2, COMM_F32) : COMM_ESYS,
              "all_gather of the ranks' places");
    for (int q = 0; q < p && all && !fails; q++) {
        if (all[2 * q] == me[0])
            local[nlocal++] = q;
        if (all[2 * q + 1] == me[1])
            cross[ncross++] = q;
        int first = 1;   /* the first rank seen on its node counts the node */
        for (int k = 0; k < q; k++)
            if (all[2 * k] == all[2 * q])
                first = 0;
        nodes += first;
    }
    free(all);
    comm *lc = NULL, *xc = NULL;
    if (!fails && comm_group(w, local, nlocal, &lc, err, sizeof err) != COMM_OK)
        fail("node-local group", err);
    if (!fails && comm_group(w, cross, ncross, &xc, err, sizeof err) != COMM_OK)
        fail("cross-node group", err);
    if (!fails) {
        const char *want_w = nodes > 1 ? "tcp" : p > 1 ? "shm" : "self";
        const char *want_l = nlocal > 1 ? "shm" : "self";
        const char *want_x = ncross > 1 ? (nodes > 1 ? "tcp" : "shm") : "self";
        char d[200];
        snprintf(d, sizeof d, "world %s (want %s), local %s (want %s), cross %s (want %s)",
                 comm_transport(w), want_w, comm_transport(lc), want_l, comm_transport(xc),
                 want_x);
        if (strcmp(comm_transport(w), want_w) || strcmp(comm_transport(lc), want_l) ||
            strcmp(comm_transport(xc), want_x))
            fail("transports", d);
    }
    if (lc && xc) {   /* even after a wrong transport: the peers expect these calls */
        static const size_t world_counts[] = {0, 7, (1u << 20) + 3};
        static const size_t group_counts[] = {0, 7, 1000};
        check_all(w, world_counts, 3, 1);
        check_all(lc, group_counts, 3, 100);
        check_all(xc, group_counts, 3, 200);
    }
    if (!fails)
        printf("comm_check: rank %d of %d passed: world %s, local %s (%d), cross %s (%d), "
               "%d checks\n", r, p, comm_transport(w), comm_transport(lc), nlocal,
               comm_transport(xc), ncross, checks);
    if (xc)
        comm_destroy(xc);
    if (lc)
        comm_destroy(lc);
    comm_destroy(w);
    store_close(st);
    return fails ? 1 : 0;
}
