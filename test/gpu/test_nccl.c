/* test_nccl.c — the communication layer on a GPU: the NCCL backend and the
 * CPU transport with device buffers (runtime/comm/comm_nccl.h, comm_stage.c).
 *
 * In this process (one rank, DTRUN_COMM_BACKEND=nccl, so every call is a real
 * NCCL call on a one-rank communicator):
 *   - every collective, blocking and asynchronous, f32 and bf16, counts 0, 1,
 *     7 and 1 Mi + 3, in and out of place: with one rank each result is its
 *     input, bit for bit, and every output element is written;
 *   - host buffers on an NCCL communicator (staged through device memory);
 *   - a group of one (also NCCL when forced), a barrier;
 *   - the timeout path: the compute stream held by a host function longer
 *     than the communicator's timeout makes the collective fail with
 *     COMM_ETIMEOUT and one line naming it, the communicator aborted, later
 *     calls COMM_EBROKEN, destroy prompt, the device still healthy.
 * In child processes (fork + exec of this binary, file store):
 *   - worlds of 2 and 3 ranks, DTRUN_COMM_BACKEND=auto, each rank on GPU
 *     LOCAL_RANK % count: on a one-GPU machine they share it, so auto must
 *     choose the CPU transport (shm) and stage device buffers through host
 *     memory; with one GPU per rank it must choose NCCL. Either way every
 *     collective and send / recv is checked against a reference computed
 *     locally (integer-valued inputs: exact in bf16 and in any order);
 *   - two ranks on one GPU with DTRUN_COMM_BACKEND=nccl: each fails at once
 *     with the line that NCCL refuses two ranks on one GPU.
 * Prints "ok - ..." / "not ok - ..." (test/gpu/run.sh counts them). */
#include <stdarg.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "runtime/env.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/store.h"
#include "test/unit/check.h"

#ifdef DTRUN_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/ops_cuda.h"

static const dt_ops *gpu;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const size_t COUNTS[] = {0, 1, 7, (1u << 20) + 3};
#define N_COUNTS (sizeof COUNTS / sizeof COUNTS[0])

static const char *dt_name(comm_dtype dt) { return dt == COMM_BF16 ? "bf16" : "f32"; }

/* Integer-valued inputs in [-8, 8]: sums over a few ranks and maxima are
 * exact in bf16 and fp32 in any order, averages over 1 or 2 ranks too (over
 * 3 the check allows rounding: first_bad). */
static float value(int rank, size_t i) { return (float)((int)((i * 7 + (size_t)rank * 3) % 17) - 8); }

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);  /* exact for the values used here */
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A host array of n elements of dt holding f(rank, offset + i). */
static void *host_fill(comm_dtype dt, size_t n, int rank, size_t offset)
{
    size_t es = comm_dtype_size(dt);
    char *h = malloc(n * es + 1);
    for (size_t i = 0; i < n; i++) {
        float v = value(rank, offset + i);
        if (dt == COMM_BF16) {
            uint16_t b = to_bf16(v);
            memcpy(h + i * 2, &b, 2);
        } else {
            memcpy(h + i * 4, &v, 4);
        }
    }
    return h;
}

static float host_get(comm_dtype dt, const void *h, size_t i)
{
    if (dt == COMM_BF16) {
        uint16_t b;
        memcpy(&b, (const char *)h + i * 2, 2);
        return from_bf16(b);
    }
    float f;
    memcpy(&f, (const char *)h + i * 4, 4);
    return f;
}

/* A device buffer of n elements with the given host contents (or 0xFF bytes:
 * NaN in both dtypes, so an element nobody wrote never compares equal). */
static void *dev_from(const void *h, size_t bytes)
{
    void *d = gpu->alloc(bytes ? bytes : 4);
    if (h && bytes) {
        gpu->from_host(d, h, bytes);
    } else if (bytes) {
        void *ff = malloc(bytes);
        memset(ff, 0xFF, bytes);
        gpu->from_host(d, ff, bytes);
        free(ff);
    }
    return d;
}

static void *dev_to_host(const void *d, size_t bytes)
{
    void *h = malloc(bytes + 1);
    if (bytes) gpu->to_host(h, d, bytes);
    return h;
}

/* The reference of element i (global index) of a reduction over W ranks. */
static float ref_reduce(comm_op op, int W, size_t i)
{
    float s = 0, m = value(0, i);
    for (int r = 0; r < W; r++) {
        s += value(r, i);
        if (value(r, i) > m) m = value(r, i);
    }
    return op == COMM_SUM ? s : op == COMM_MAX ? m : s / (float)W;
}

/* Compares n elements of got (host, dt) with want(i) for i from `offset`;
 * returns the first bad index or -1. AVG over 3 ranks is not exact in bf16:
 * then a relative tolerance of one bf16 ulp. */
static long first_bad(comm_dtype dt, const void *got, size_t n, size_t offset, comm_op op, int W,
                      int kind /* 0 reduce, 1 value(root), 2 value(owner) */, int root)
{
    for (size_t i = 0; i < n; i++) {
        size_t g = offset + i;
        float want;
        if (kind == 0) {
            want = ref_reduce(op, W, g);
        } else if (kind == 1) {
            want = value(root, g);
        } else {
            size_t chunk = (n + (size_t)W - 1) / (size_t)W;
            want = value(chunk ? (int)(i / chunk) : 0, g);
        }
        if (dt == COMM_BF16) want = from_bf16(to_bf16(want));
        float v = host_get(dt, got, i);
        double tol = (kind == 0 && op == COMM_AVG && W == 3) ? 1e-2 * (1 + (want < 0 ? -want : want)) : 0;
        double d = (double)v - (double)want;
        if (!(d <= tol && -d <= tol)) return (long)i;
    }
    return -1;
}

static void chunk_of(size_t count, int size, int rank, size_t *off, size_t *len)
{
    size_t chunk = size > 0 ? (count + (size_t)size - 1) / (size_t)size : 0;
    size_t o = chunk * (size_t)rank;
    if (o > count) o = count;
    size_t end = o + chunk < count ? o + chunk : count;
    *off = o;
    *len = end - o;
}

/* ---- the collective suite, for any world (used by the one-rank test and
 * the children). Each check names rank, dtype, count, op. Returns failures. ---- */

typedef struct {
    comm *c;
    int verbose;                 /* 1: CHECK lines (parent); 0: "# " lines on failure */
    int fails;
    char tag[64];
} suite;

static void expect(suite *s, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void expect(suite *s, int ok, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (s->verbose) {
        CHECK(ok, "%s: %s", s->tag, line);
    } else if (!ok) {
        printf("# %s: FAILED %s\n", s->tag, line);
        fflush(stdout);
    }
    if (!ok) s->fails++;
}

static void run_suite(suite *s, int with_p2p)
{
    comm *c = s->c;
    int W = comm_size(c), me = comm_rank(c);
    comm_dtype dts[2] = {COMM_F32, COMM_BF16};
    const char *opn[3] = {"sum", "avg", "max"};
    for (int di = 0; di < 2; di++) {
        comm_dtype dt = dts[di];
        size_t es = comm_dtype_size(dt);
        for (size_t ci = 0; ci < N_COUNTS; ci++) {
            size_t n = COUNTS[ci], off, len;
            chunk_of(n, W, me, &off, &len);
            void *mine = host_fill(dt, n, me, 0);
            /* all_reduce: out of place, in place, async, every op */
            for (int op = 0; op < 3; op++) {
                void *in = dev_from(mine, n * es), *out = dev_from(NULL, n * es);
                int rc = comm_all_reduce(c, in, out, n, dt, (comm_op)op);
                void *h = dev_to_host(out, n * es);
                long b = first_bad(dt, h, n, 0, (comm_op)op, W, 0, 0);
                expect(s, rc == COMM_OK && b < 0, "all_reduce %s %s n=%zu out of place (rc %d, bad at %ld%s%s)",
                       opn[op], dt_name(dt), n, rc, b, rc ? ": " : "", rc ? comm_last_error(c) : "");
                free(h);
                comm_req *req = NULL;
                rc = comm_all_reduce_async(c, in, in, n, dt, (comm_op)op, &req);
                if (rc == COMM_OK) rc = comm_wait(req);
                h = dev_to_host(in, n * es);
                b = first_bad(dt, h, n, 0, (comm_op)op, W, 0, 0);
                expect(s, rc == COMM_OK && b < 0, "all_reduce_async %s %s n=%zu in place (rc %d, bad at %ld)",
                       opn[op], dt_name(dt), n, rc, b);
                free(h);
                gpu->free(in);
                gpu->free(out);
            }
            /* reduce_scatter (sum): out of place and in place (recv = send + offset) */
            {
                void *in = dev_from(mine, n * es), *out = dev_from(NULL, len * es);
                int rc = comm_reduce_scatter(c, in, out, n, dt, COMM_SUM);
                void *h = dev_to_host(out, len * es);
                long b = first_bad(dt, h, len, off, COMM_SUM, W, 0, 0);
                expect(s, rc == COMM_OK && b < 0, "reduce_scatter %s n=%zu (rc %d, bad at %ld)", dt_name(dt), n, rc, b);
                free(h);
                comm_req *req = NULL;
                rc = comm_reduce_scatter_async(c, in, (char *)in + off * es, n, dt, COMM_SUM, &req);
                if (rc == COMM_OK) rc = comm_wait(req);
                h = dev_to_host((char *)in + off * es, len * es);
                b = first_bad(dt, h, len, off, COMM_SUM, W, 0, 0);
                expect(s, rc == COMM_OK && b < 0, "reduce_scatter_async %s n=%zu in place (rc %d, bad at %ld)",
                       dt_name(dt), n, rc, b);
                free(h);
                gpu->free(in);
                gpu->free(out);
            }
            /* all_gather: each rank contributes value(owner, global index) */
            {
                void *part = NULL;
                {
                    /* this rank's chunk holds value(me, off + i) */
                    char *p = host_fill(dt, n, me, 0);
                    part = dev_from(p + off * es, len * es);
                    free(p);
                }
                void *out = dev_from(NULL, n * es);
                int rc = comm_all_gather(c, part, out, n, dt);
                void *h = dev_to_host(out, n * es);
                long b = first_bad(dt, h, n, 0, COMM_SUM, W, 2, 0);
                expect(s, rc == COMM_OK && b < 0, "all_gather %s n=%zu (rc %d, bad at %ld)", dt_name(dt), n, rc, b);
                free(h);
                /* in place: send = recv + offset */
                void *full = dev_from(mine, n * es);
                comm_req *req = NULL;
                rc = comm_all_gather_async(c, (char *)full + off * es, full, n, dt, &req);
                if (rc == COMM_OK) rc = comm_wait(req);
                h = dev_to_host(full, n * es);
                b = first_bad(dt, h, n, 0, COMM_SUM, W, 2, 0);
                expect(s, rc == COMM_OK && b < 0, "all_gather_async %s n=%zu in place (rc %d, bad at %ld)",
                       dt_name(dt), n, rc, b);
                free(h);
                gpu->free(part);
                gpu->free(out);
                gpu->free(full);
            }
            /* broadcast from the last rank */
            {
                int root = W - 1;
                void *buf = me == root ? dev_from(mine, n * es) : dev_from(NULL, n * es);
                int rc = comm_broadcast(c, buf, n, dt, root);
                void *h = dev_to_host(buf, n * es);
                long b = first_bad(dt, h, n, 0, COMM_SUM, W, 1, root);
                expect(s, rc == COMM_OK && b < 0, "broadcast %s n=%zu root %d (rc %d, bad at %ld)", dt_name(dt), n,
                       root, rc, b);
                free(h);
                gpu->free(buf);
            }
            /* host buffers through the same communicator */
            {
                void *out = malloc(n * es + 1);
                memset(out, 0xFF, n * es);
                int rc = comm_all_reduce(c, mine, out, n, dt, COMM_SUM);
                long b = first_bad(dt, out, n, 0, COMM_SUM, W, 0, 0);
                expect(s, rc == COMM_OK && b < 0, "all_reduce %s n=%zu on host buffers (rc %d, bad at %ld)",
                       dt_name(dt), n, rc, b);
                free(out);
            }
            /* send / recv with every peer, both directions at once (async),
             * peers in increasing order (NCCL makes a pair's lanes at its
             * first exchange: ranks must first meet in a consistent order,
             * see comm_nccl.h) */
            if (with_p2p && W > 1) {
                void *a = dev_from(mine, n * es), *got = dev_from(NULL, n * es);
                for (int q = 0; q < W; q++) {
                    if (q == me) continue;
                    comm_req *r1 = NULL, *r2 = NULL;
                    int rc = comm_send_async(c, a, n, dt, q, &r1);
                    if (rc == COMM_OK) rc = comm_recv_async(c, got, n, dt, q, &r2);
                    int w1 = comm_wait(r1), w2 = comm_wait(r2);
                    void *h = dev_to_host(got, n * es);
                    long b = first_bad(dt, h, n, 0, COMM_SUM, W, 1, q);
                    expect(s, rc == COMM_OK && !w1 && !w2 && b < 0,
                           "send/recv %s n=%zu with rank %d both ways at once (rc %d %d %d, bad at %ld%s%s)",
                           dt_name(dt), n, q, rc, w1, w2, b, rc || w1 || w2 ? ": " : "",
                           rc || w1 || w2 ? comm_last_error(c) : "");
                    free(h);
                }
                /* blocking, host buffer on one side: rank 0 sends to rank 1 */
                if (me <= 1) {
                    void *hb = me == 0 ? host_fill(dt, n, 0, 0) : malloc(n * es + 1);
                    int rb = me == 0 ? comm_send(c, hb, n, dt, 1) : comm_recv(c, hb, n, dt, 0);
                    long bb = me == 1 ? first_bad(dt, hb, n, 0, COMM_SUM, W, 1, 0) : -1;
                    expect(s, rb == COMM_OK && bb < 0, "blocking %s of %s n=%zu from a host buffer (rc %d, bad at %ld)",
                           me == 0 ? "send" : "recv", dt_name(dt), n, rb, bb);
                    free(hb);
                }
                gpu->free(a);
                gpu->free(got);
            }
            /* all_to_allv: uneven pieces (some empty), device buffers blocking
             * and host buffers asynchronous; piece q -> r holds the values of
             * "rank" q * 31 + r, compared byte for byte */
            {
                size_t sc[64], rcn[64], ns = 0, nr = 0;
                for (int q = 0; q < W && q < 64; q++) {
                    sc[q] = (me + q) % 3 == 1 ? 0 : n / 3 + (size_t)(q * 5 + me * 3);
                    rcn[q] = (q + me) % 3 == 1 ? 0 : n / 3 + (size_t)(me * 5 + q * 3);
                    ns += sc[q], nr += rcn[q];
                }
                char *hs = malloc(ns * es + 1), *want = malloc(nr * es + 1), *got = malloc(nr * es + 1);
                size_t o = 0;
                for (int q = 0; q < W; q++) {
                    void *piece = host_fill(dt, sc[q], me * 31 + q, 0);
                    memcpy(hs + o * es, piece, sc[q] * es);
                    free(piece);
                    o += sc[q];
                }
                o = 0;
                for (int q = 0; q < W; q++) {
                    void *piece = host_fill(dt, rcn[q], q * 31 + me, 0);
                    memcpy(want + o * es, piece, rcn[q] * es);
                    free(piece);
                    o += rcn[q];
                }
                void *ds = dev_from(hs, ns * es), *dr = dev_from(NULL, nr * es);
                int rc = comm_all_to_allv(c, ds, sc, dr, rcn, dt);
                void *h = dev_to_host(dr, nr * es);
                expect(s, rc == COMM_OK && !memcmp(h, want, nr * es), "all_to_allv %s n=%zu on device buffers (rc %d%s%s)",
                       dt_name(dt), n, rc, rc ? ": " : "", rc ? comm_last_error(c) : "");
                free(h);
                comm_req *req = NULL;
                memset(got, 0xFF, nr * es);
                rc = comm_all_to_allv_async(c, hs, sc, got, rcn, dt, &req);
                if (rc == COMM_OK) rc = comm_wait(req);
                expect(s, rc == COMM_OK && !memcmp(got, want, nr * es), "all_to_allv_async %s n=%zu on host buffers (rc %d)",
                       dt_name(dt), n, rc);
                gpu->free(ds);
                gpu->free(dr);
                free(hs), free(want), free(got);
            }
            free(mine);
        }
    }
    int rc = comm_barrier(c);
    expect(s, rc == COMM_OK, "barrier (rc %d)", rc);
    comm_req *req = NULL;
    rc = comm_barrier_async(c, &req);
    if (rc == COMM_OK) rc = comm_wait(req);
    expect(s, rc == COMM_OK, "barrier_async (rc %d)", rc);
}

/* ---- children: one rank of a multi-process world ---- */

static int child(const char *mode)
{
    char err[1024];
    int rank = atoi(getenv("RANK")), local = atoi(getenv("LOCAL_RANK"));
    if (!(gpu = dt_ops_select(DT_DEVICE_CUDA, local, err, sizeof err))) {
        printf("# rank %d: %s\n", rank, err);
        return 1;
    }
    comm_set_ops(gpu);
    comm_store *st = store_open_env(err, sizeof err);
    if (!st) {
        printf("# rank %d: store: %s\n", rank, err);
        return 1;
    }
    comm *w = NULL;
    int rc = comm_world_init(&w, st, err, sizeof err);
    if (!strcmp(mode, "refuse")) {
        /* two ranks on one GPU, NCCL forced: one clear line, at once */
        int ok = rc == COMM_EINVAL && !w && strstr(err, "share GPU") && strstr(err, "NCCL refuses") &&
                 !strchr(err, '\n');
        printf("# rank %d: %s\n", rank, err);
        if (w) comm_destroy(w);
        store_close(st);
        return ok ? 0 : 1;
    }
    if (rc != COMM_OK) {
        printf("# rank %d: world: %s\n", rank, err);
        return 1;
    }
    int ngpu = 0;
    cudaGetDeviceCount(&ngpu);
    int W = comm_size(w);
    const char *want = ngpu >= W ? "nccl" : "shm";
    int fails = 0;
    if (strcmp(comm_transport(w), want) != 0) {
        printf("# rank %d: transport %s, expected %s (%d GPUs, %d ranks)\n", rank, comm_transport(w), want, ngpu, W);
        fails++;
    }
    suite s = {.c = w, .verbose = 0};
    snprintf(s.tag, sizeof s.tag, "rank %d of %d (%s)", rank, W, comm_transport(w));
    run_suite(&s, 1);
    fails += s.fails;
    /* a group of the first two ranks (the tied-embedding pattern: only the
     * members call comm_group) */
    if (W > 2 && rank < 2) {
        comm *g = NULL;
        int members[2] = {0, 1};
        rc = comm_group(w, members, 2, &g, err, sizeof err);
        if (rc != COMM_OK) {
            printf("# rank %d: group: %s\n", rank, err);
            fails++;
        } else {
            suite sg = {.c = g, .verbose = 0};
            snprintf(sg.tag, sizeof sg.tag, "rank %d of group[0,1] (%s)", rank, comm_transport(g));
            run_suite(&sg, 1);
            fails += sg.fails;
            comm_destroy(g);
        }
    }
    rc = comm_barrier(w);
    if (rc != COMM_OK) {
        printf("# rank %d: final barrier: %s\n", rank, comm_last_error(w));
        fails++;
    }
    comm_destroy(w);
    store_close(st);
    return fails ? 1 : 0;
}

/* Runs W children of this binary in `mode`; returns how many failed (a child
 * still running after limit_s is killed and counts as failed). */
static int run_children(const char *self, const char *mode, int W, const char *backend, double limit_s,
                        double *took)
{
    char dir[] = "/tmp/dtrun-test-nccl.XXXXXX";
    if (!mkdtemp(dir)) return W;
    pid_t pids[8];
    for (int r = 0; r < W; r++) {
        pid_t p = fork();
        if (p == 0) {
            char v[64], store[128];
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1);
            setenv("LOCAL_RANK", v, 1);
            snprintf(v, sizeof v, "%d", W);
            setenv("WORLD_SIZE", v, 1);
            setenv("LOCAL_WORLD_SIZE", v, 1);
            setenv("GROUP_RANK", "0", 1);
            snprintf(store, sizeof store, "file:%s", dir);
            setenv("DTRUN_STORE", store, 1);
            setenv("DTRUN_COMM_BACKEND", backend, 1);
            setenv("DTRUN_COMM_TIMEOUT", "60", 1);
            dt_env_reload();
            execl(self, self, "--child", mode, (char *)NULL);
            _exit(127);
        }
        pids[r] = p;
    }
    double t0 = now_s();
    int failed = 0, left = W;
    while (left > 0) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p > 0) {
            left--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
            continue;
        }
        if (now_s() - t0 > limit_s) {
            for (int r = 0; r < W; r++) kill(pids[r], SIGKILL);
            while (left > 0 && waitpid(-1, &status, 0) > 0) left--, failed++;
            printf("# %s: killed after %.0f s\n", mode, limit_s);
            break;
        }
        usleep(20000);
    }
    *took = now_s() - t0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    return failed;
}

/* ---- the one-rank tests in this process ---- */

static void CUDART_CB hold_stream(void *arg)
{
    (void)arg;
    sleep(3);  /* longer than the 1 s timeout below; bounded either way */
}

static void one_rank(void)
{
    char err[1024];
    setenv("DTRUN_COMM_BACKEND", "nccl", 1);
    dt_env_reload();
    comm *w = NULL;
    int rc = comm_world_init_with(&w, NULL, 0, 1, NULL, err, sizeof err);
    CHECK(rc == COMM_OK && !strcmp(comm_transport(w), "nccl"), "one-rank world on NCCL (rc %d, transport %s%s%s)",
          rc, w ? comm_transport(w) : "-", rc ? ": " : "", rc ? err : "");
    if (rc != COMM_OK) return;
    suite s = {.c = w, .verbose = 1};
    snprintf(s.tag, sizeof s.tag, "nccl 1 rank");
    run_suite(&s, 0);

    comm *g = NULL;
    int member = 0;
    rc = comm_group(w, &member, 1, &g, err, sizeof err);
    CHECK(rc == COMM_OK && !strcmp(comm_transport(g), "nccl"), "group of one on NCCL when forced (rc %d%s%s)", rc,
          rc ? ": " : "", rc ? err : "");
    if (rc == COMM_OK) {
        size_t n = 1000;
        void *h = host_fill(COMM_F32, n, 0, 0), *d = dev_from(h, n * 4);
        rc = comm_all_reduce(g, d, d, n, COMM_F32, COMM_MAX);
        void *back = dev_to_host(d, n * 4);
        CHECK(rc == COMM_OK && !memcmp(back, h, n * 4), "all_reduce on the group of one");
        free(h), free(back);
        gpu->free(d);
        comm_destroy(g);
    }

    /* a 64 MiB all_reduce, timed: one rank is a device copy, so this is
     * only a sanity figure for the path's overhead */
    {
        size_t n = 16u << 20;
        void *d = dev_from(NULL, n * 4);
        rc = comm_all_reduce(w, d, d, n, COMM_F32, COMM_SUM);
        double t0 = now_s();
        for (int i = 0; i < 10 && rc == COMM_OK; i++) rc = comm_all_reduce(w, d, d, n, COMM_F32, COMM_SUM);
        double t = (now_s() - t0) / 10;
        CHECK(rc == COMM_OK, "64 MiB all_reduce x10 on one rank: %.3f ms each", t * 1e3);
        gpu->free(d);
    }
    comm_destroy(w);

    /* timeout: a fresh world whose collective cannot start for 3 s */
    w = NULL;
    rc = comm_world_init_with(&w, NULL, 0, 1, NULL, err, sizeof err);
    if (rc != COMM_OK) {
        CHECK(0, "second world: %s", err);
        return;
    }
    comm_set_timeout(w, 1.0);
    size_t n = 1024;
    void *d = dev_from(NULL, n * 4);
    cudaStream_t cs = (cudaStream_t)dt_ops_cuda_stream();
    cudaError_t e = cudaLaunchHostFunc(cs, hold_stream, NULL);
    double t0 = now_s();
    rc = comm_all_reduce(w, d, d, n, COMM_F32, COMM_SUM);
    double took = now_s() - t0;
    const char *line = comm_last_error(w);
    CHECK(e == cudaSuccess && rc == COMM_ETIMEOUT && strstr(line, "all_reduce") && strstr(line, "timed out") &&
              !strchr(line, '\n') && took > 0.9 && took < 10,
          "held compute stream: all_reduce fails with COMM_ETIMEOUT in %.1f s (timeout 1 s): %s", took, line);
    rc = comm_all_reduce(w, d, d, n, COMM_F32, COMM_SUM);
    CHECK(rc == COMM_EBROKEN, "after the timeout the communicator is broken (rc %d)", rc);
    t0 = now_s();
    comm_destroy(w);
    CHECK(now_s() - t0 < 10, "destroying the aborted communicator takes %.1f s", now_s() - t0);
    e = cudaStreamSynchronize(cs);
    CHECK(e == cudaSuccess, "the device is healthy after the abort (%s)", cudaGetErrorString(e));
    gpu->free(d);
    unsetenv("DTRUN_COMM_BACKEND");
    dt_env_reload();
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    char err[512];
    if (!(gpu = dt_ops_select(DT_DEVICE_AUTO, 0, err, sizeof err)) || gpu->host_memory) {
        printf("test-gpu: no CUDA device: skipped\n");
        return 0;
    }
    comm_set_ops(gpu);
    int ngpu = 0;
    cudaGetDeviceCount(&ngpu);
    printf("# device: %s (%d visible)\n", dt_ops_cuda_device_name(), ngpu);
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        CHECK(0, "readlink /proc/self/exe");
        return 1;
    }
    self[len] = '\0';

    for (int W = 2; W <= 3; W++) {
        double took;
        int f = run_children(self, "suite", W, "auto", 240, &took);
        CHECK(f == 0, "%d ranks, DTRUN_COMM_BACKEND=auto (%s): every collective and send/recv on device "
                      "buffers matches the reference (%d ranks failed, %.1f s)",
              W, ngpu >= W ? "one GPU each: nccl" : "sharing GPUs: shm + host staging", f, took);
    }
    if (ngpu < 2) {
        double took;
        int f = run_children(self, "refuse", 2, "nccl", 120, &took);
        CHECK(f == 0 && took < 60, "2 ranks on one GPU with DTRUN_COMM_BACKEND=nccl: a clear refusal on each rank "
                                   "(%d failed, %.1f s)", f, took);
    }
    one_rank();
    CHECK_DONE();
}

#else /* a build without the CUDA backend */

int main(void)
{
    printf("test-gpu: no CUDA device: skipped\n");
    CHECK_DONE();
}

#endif
