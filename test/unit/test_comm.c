/* test_comm.c — the communication layer, with real processes: every collective
 * against a locally computed reference (worlds 1-8 on shm, 2-8 on tcp; counts
 * 0, 1, 7, 1000 and 1Mi+3; f32 and bf16; blocking and asynchronous; in place
 * and not), send / recv, groups from the mesh, the shm and tcp transports, the
 * file and KV stores, and failures: a peer SIGKILLed mid-collective and a
 * silent peer must become errors on every survivor within the timeout, naming
 * the rank. (Across real nodes: test/integration/comm_netns.sh.)
 *
 * Each scenario forks one process per rank; a child checks its own results and
 * exits 0 (all good) or 1 (failures printed as "# rank R: ..."). The parent
 * holds a hard deadline per scenario and kills the children past it, so a hang
 * is a failed check, never a stuck test. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/rdzv/rdzv.h"
#include "runtime/env.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/store.h"
#include "runtime/parallel/mesh.h"
#include "test/helpers/comm_data.h"
#include "test/unit/check.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define TIMEOUT_S 3.0

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- child-side failure reporting ---- */

static int child_fails;
static int child_rank;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    if (child_fails++ >= 8)
        return;  /* the first few say enough */
    va_list ap;
    va_start(ap, fmt);
    printf("# rank %d: ", child_rank);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

#define EXPECT_OK(c, rc, what)                                                           \
    do {                                                                                 \
        int rc_ = (rc);                                                                  \
        if (rc_ != COMM_OK)                                                              \
            fail("%s: rc %d: %s", what, rc_, comm_last_error(c));                        \
    } while (0)

/* ---- data ---- */

/* The data scheme (inputs, bf16 conversions, closed-form references) lives in
 * test/helpers/comm_data.h, shared with the network-namespace test's workers. */
static void fill(comm_dtype dt, void *buf, int p, int rank, size_t off, size_t n, int salt)
{
    fill_seeded(dt, buf, p, rank, off, n, salt_seed(dt, salt));
}

static int same(float a, float b)
{
    return a == b || (a != a && b != b);
}

/* ---- the per-process scenarios ---- */

static const char *dt_name(comm_dtype dt) { return dt == COMM_F32 ? "f32" : "bf16"; }
static const char *op_name(comm_op op) { return op == COMM_SUM ? "sum" : op == COMM_AVG ? "avg" : "max"; }

/* Buffer k of this process, kept from round to round: fresh 4 MiB buffers for
 * every round cost more in page faults (on this VM) than the collectives do.
 * Freed at exit; the contents are never assumed. */
static char *scratch(int k, size_t bytes)
{
    static char *buf[8];
    static size_t cap[8];
    if (bytes + 16 > cap[k]) {
        free(buf[k]);
        buf[k] = malloc(bytes + 16);
        if (!buf[k]) {
            fail("out of memory (%zu bytes)", bytes);
            exit(1);
        }
        cap[k] = bytes + 16;
    }
    return buf[k];
}

/* One round of every collective on c for (count, dtype, op), blocking or async. */
static void check_collectives(comm *c, size_t n, comm_dtype dt, comm_op op, int async, int salt)
{
    int p = comm_size(c), r = comm_rank(c);
    size_t es = dt == COMM_F32 ? 4 : 2;
    char what[160];
    snprintf(what, sizeof what, "n=%zu %s %s %s p=%d", n, dt_name(dt), op_name(op),
             async ? "async" : "sync", p);
    size_t off, len;
    comm_chunk(n, p, r, &off, &len);
    char *in = scratch(0, n * es), *out = scratch(1, n * es), *inpl = scratch(2, n * es);
    char *rs = scratch(3, len * es), *ag = scratch(4, n * es), *bc = scratch(5, n * es);
    char *mine = scratch(6, len * es), *rsin = scratch(7, n * es);
    int root = p > 1 ? (int)(n % (size_t)p) : 0;
    uint32_t seed = salt_seed(dt, salt), ag_seed = salt_seed(dt, salt + 1),
             bc_seed = salt_seed(dt, salt + 2);
    fill(dt, in, p, r, 0, n, salt);
    memcpy(inpl, in, n * es);
    memcpy(rsin, in, n * es);
    fill(dt, mine, p, r, off, len, salt + 1);
    if (r == root)
        fill(dt, bc, p, root, 0, n, salt + 2);
    else
        memset(bc, 0x55, n * es);

    /* reduce_scatter and all_gather also run in place (recv = send + this rank's
     * chunk, the contract allows it), every other round, so both forms meet
     * both placements across a sweep. */
    int in_place = (salt >> 1) & 1;
    char *rs_out = in_place ? rsin + off * es : rs;
    const char *ag_in = in_place ? ag + off * es : mine;
    if (in_place)
        memcpy(ag + off * es, mine, len * es);
    comm_req *req[6] = {0};
    int rc[6] = {0};
    if (async) {
        rc[0] = comm_all_reduce_async(c, in, out, n, dt, op, &req[0]);
        rc[1] = comm_all_reduce_async(c, inpl, inpl, n, dt, op, &req[1]);
        rc[2] = comm_reduce_scatter_async(c, rsin, rs_out, n, dt, op, &req[2]);
        rc[3] = comm_all_gather_async(c, ag_in, ag, n, dt, &req[3]);
        rc[4] = comm_broadcast_async(c, bc, n, dt, root, &req[4]);
        rc[5] = comm_barrier_async(c, &req[5]);
        for (int k = 5; k >= 0; k--) {   /* waiting out of order is fine */
            int w = comm_wait(req[k]);
            if (rc[k] == COMM_OK)
                rc[k] = w;
        }
    } else {
        rc[0] = comm_all_reduce(c, in, out, n, dt, op);
        rc[1] = comm_all_reduce(c, inpl, inpl, n, dt, op);
        rc[2] = comm_reduce_scatter(c, rsin, rs_out, n, dt, op);
        rc[3] = comm_all_gather(c, ag_in, ag, n, dt);
        rc[4] = comm_broadcast(c, bc, n, dt, root);
        rc[5] = comm_barrier(c);
    }
    const char *names[6] = {"all_reduce", "all_reduce in place", "reduce_scatter", "all_gather",
                            "broadcast", "barrier"};
    for (int k = 0; k < 6; k++)
        if (rc[k] != COMM_OK)
            fail("%s %s: rc %d: %s", names[k], what, rc[k], comm_last_error(c));
    for (size_t i = 0; i < n; i++) {
        float want = reference(dt, op, p, i, seed);
        if (!same(get(dt, out, i), want)) {
            fail("all_reduce %s: [%zu] = %g, want %g", what, i, get(dt, out, i), want);
            break;
        }
        if (!same(get(dt, inpl, i), want)) {
            fail("all_reduce in place %s: [%zu] = %g, want %g", what, i, get(dt, inpl, i), want);
            break;
        }
    }
    for (size_t i = 0; i < len; i++) {
        float want = reference(dt, op, p, off + i, seed);
        if (!same(get(dt, rs_out, i), want)) {
            fail("reduce_scatter%s %s: [%zu] = %g, want %g", in_place ? " in place" : "", what,
                 off + i, get(dt, rs_out, i), want);
            break;
        }
    }
    for (int q = 0; q < p; q++) {
        size_t qo, ql;
        comm_chunk(n, p, q, &qo, &ql);
        for (size_t i = 0; i < ql; i++) {
            float want = value_of(terms(dt, p, qo + i, ag_seed), p, q);
            if (!same(get(dt, ag, qo + i), want)) {
                fail("all_gather%s %s: [%zu] from rank %d = %g, want %g",
                     in_place ? " in place" : "", what, qo + i, q,
                     get(dt, ag, qo + i), want);
                q = p;
                break;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        float want = value_of(terms(dt, p, i, bc_seed), p, root);
        if (!same(get(dt, bc, i), want)) {
            fail("broadcast %s from %d: [%zu] = %g, want %g", what, root, i, get(dt, bc, i), want);
            break;
        }
    }
}

/* Send / recv: a ring exchange (everyone sends to r+1 and receives from r-1 at
 * once: async, or the engine's concurrent progress would be needed) and a chain
 * of blocking sends. */
static void check_p2p(comm *c, size_t n, comm_dtype dt, int salt)
{
    int p = comm_size(c), r = comm_rank(c);
    if (p < 2)
        return;
    size_t es = dt == COMM_F32 ? 4 : 2;
    uint32_t seed = salt_seed(dt, salt);
    char *a = scratch(0, n * es), *b = scratch(1, n * es);
    fill(dt, a, p, r, 0, n, salt);
    comm_req *s = NULL, *q = NULL;
    int rc1 = comm_send_async(c, a, n, dt, (r + 1) % p, &s);
    int rc2 = comm_recv_async(c, b, n, dt, (r + p - 1) % p, &q);
    int w1 = comm_wait(s), w2 = comm_wait(q);
    if (rc1 || rc2 || w1 || w2)
        fail("ring send/recv n=%zu: rc %d %d %d %d: %s", n, rc1, rc2, w1, w2, comm_last_error(c));
    for (size_t i = 0; i < n; i++)
        if (!same(get(dt, b, i), value_of(terms(dt, p, i, seed), p, (r + p - 1) % p))) {
            fail("ring recv n=%zu: [%zu] wrong", n, i);
            break;
        }
    /* chain 0 -> 1 -> ... -> p-1, blocking */
    if (r > 0) {
        EXPECT_OK(c, comm_recv(c, b, n, dt, r - 1), "chain recv");
        for (size_t i = 0; i < n; i++)
            if (!same(get(dt, b, i), value_of(terms(dt, p, i, seed), p, 0))) {
                fail("chain recv n=%zu: [%zu] wrong", n, i);
                break;
            }
    }
    if (r < p - 1)
        EXPECT_OK(c, comm_send(c, r == 0 ? a : b, n, dt, r + 1), "chain send");
}

/* ---- running a world of processes ---- */

typedef int (*body_fn)(comm *world, void *arg);

typedef struct {
    const char *transport;    /* DTRUN_COMM_TRANSPORT, NULL = auto */
    const char *const *nodes; /* node id per rank, NULL = all on this host */
    int use_kv;               /* 1: bootstrap through a real rendezvous daemon */
    int kill_rank;            /* >= 0: SIGKILL that rank once all are ready */
    const char *env;          /* "NAME=VALUE" put in every rank's environment, or NULL */
    double deadline_s;        /* hard limit for the whole scenario */
} world_opts;

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

static char kv_endpoint[64];
static pid_t kv_pid = -1;

/* Forks a process serving the rendezvous daemon; returns its port or -1. */
static int start_kv_daemon(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(NULL);
    kv_pid = fork();
    if (kv_pid == 0) {
        close(fds[0]);
        char err[600];
        rdzv_server_opts so = {.host = "127.0.0.1", .port = 0, .token = "test-token",
                               .min_nodes = 1, .max_nodes = 1};
        rdzv_server *s = rdzv_server_start(&so, err, sizeof err);
        int port = s ? rdzv_server_port(s) : -1;
        if (!s)
            printf("# daemon: %s\n", err);
        if (write(fds[1], &port, sizeof port) != sizeof port || !s)
            _exit(1);
        for (;;)
            pause();   /* until the test kills it */
    }
    close(fds[1]);
    int port = -1;
    if (kv_pid < 0 || read(fds[0], &port, sizeof port) != sizeof port)
        port = -1;
    close(fds[0]);
    return port;
}

static void stop_kv_daemon(void)
{
    if (kv_pid > 0) {
        kill(kv_pid, SIGKILL);
        waitpid(kv_pid, NULL, 0);
    }
}

static void child_main(int r, int n, const world_opts *o, const char *dir, body_fn body,
                       void *arg)
{
    child_rank = r;
    child_fails = 0;
    char num[16];
    snprintf(num, sizeof num, "%g", TIMEOUT_S);
    setenv("DTRUN_COMM_TIMEOUT", num, 1);
    if (o->transport)
        setenv("DTRUN_COMM_TRANSPORT", o->transport, 1);
    else
        unsetenv("DTRUN_COMM_TRANSPORT");
    if (o->env)
        putenv((char *)o->env);
    char err[600] = "";
    dt_env_reload();
    comm_store *st;
    if (o->use_kv) {
        setenv("DTRUN_KV_ENDPOINT", kv_endpoint, 1);
        setenv("DTRUN_RDZV_TOKEN", "test-token", 1);
        setenv("DTRUN_KV_PREFIX", "t/", 1);
        setenv("DTRUN_STORE", "kv", 1);
        dt_env_reload();
        st = store_open_env(err, sizeof err);
    } else {
        char spec[300];
        snprintf(spec, sizeof spec, "file:%s", dir);
        setenv("DTRUN_STORE", spec, 1);
        dt_env_reload();
        st = store_open_env(err, sizeof err);
    }
    if (!st) {
        fail("store: %s", err);
        exit(2);
    }
    comm *w = NULL;
    int rc = comm_world_init_with(&w, st, r, n, o->nodes ? o->nodes[r] : NULL, err, sizeof err);
    if (rc != COMM_OK) {
        fail("world init: rc %d: %s", rc, err);
        store_close(st);
        exit(2);
    }
    char ready[1100];
    snprintf(ready, sizeof ready, "%s/ready.%d", dir, r);
    FILE *f = fopen(ready, "w");
    if (f)
        fclose(f);
    int bad = body(w, arg);
    comm_destroy(w);
    store_close(st);
    exit(bad || child_fails ? 1 : 0);
}

static int all_ready(const char *dir, int n, int except)
{
    char path[1100];
    for (int r = 0; r < n; r++) {
        if (r == except)
            continue;
        snprintf(path, sizeof path, "%s/ready.%d", dir, r);
        if (access(path, F_OK) != 0)
            return 0;
    }
    return 1;
}

/* Runs body on n processes; returns how many survivors failed (-1 = hung and
 * killed past the deadline). */
/* The dtrun.* segments in /dev/shm now (up to 64), so that a world is not
 * blamed for one an earlier process left behind whose pid it reuses. */
static int shm_before(char names[64][256])
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < 64)
        if (!strncmp(e->d_name, "dtrun.", 6))
            snprintf(names[n++], 256, "%s", e->d_name);
    if (d)
        closedir(d);
    return n;
}

static int run_world(int n, const world_opts *o, body_fn body, void *arg)
{
    char dir[] = "/tmp/dtrun-test-comm.XXXXXX";
    if (!mkdtemp(dir))
        return -1;
    static char old[64][256];
    int n_old = shm_before(old);
    pid_t pids[16];
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            child_main(r, n, o, dir, body, arg);
    }
    double t0 = now_s();
    int killed = 0;
    int left = n, failed = 0, hung = 0;
    int exited[16] = {0};
    while (left > 0) {
        int status, reaped = 0;
        for (int r = 0; r < n; r++) {
            if (exited[r] || waitpid(pids[r], &status, WNOHANG) != pids[r])
                continue;
            reaped = 1;
            exited[r] = 1;
            left--;
            if (r != o->kill_rank && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                failed++;
                printf("# rank %d %s %d\n", r, WIFEXITED(status) ? "exited" : "killed by signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            }
        }
        if (reaped)
            continue;
        if (o->kill_rank >= 0 && !killed && all_ready(dir, n, -1)) {
            usleep(300000);  /* let them get into the collectives */
            kill(pids[o->kill_rank], SIGKILL);
            killed = 1;
        }
        if (now_s() - t0 > o->deadline_s) {
            hung = 1;
            for (int r = 0; r < n; r++)
                if (!exited[r])
                    kill(pids[r], SIGKILL);
            for (int r = 0; r < n; r++)
                if (!exited[r])
                    waitpid(pids[r], NULL, 0);
            break;
        }
        usleep(2000);
    }
    rm_tree(dir);
    /* No shared-memory segment may outlive its ranks (rank 0 makes them, named
     * /dtrun.<pid>.…, and every rank unlinks once all have mapped). */
    DIR *shm = opendir("/dev/shm");
    struct dirent *e;
    while (shm && (e = readdir(shm))) {
        int pid, seen = 0;
        if (sscanf(e->d_name, "dtrun.%d.", &pid) != 1)
            continue;
        for (int i = 0; i < n_old && !seen; i++)
            seen = !strcmp(old[i], e->d_name);
        if (seen)
            continue;
        for (int r = 0; r < n; r++)
            if (pid == pids[r]) {
                printf("# leftover shared memory /dev/shm/%s\n", e->d_name);
                failed++;
            }
    }
    if (shm)
        closedir(shm);
    printf("# world of %d took %.2f s\n", n, now_s() - t0);
    return hung ? -1 : failed;
}

/* ---- scenarios ---- */

static const size_t small_counts[] = {0, 1, 7, 1000};

typedef struct {
    const size_t *counts;
    int ncounts;
    int ops_all;   /* every op in every round; 0: one op per round, rotating
                    * sum, avg, max (with the world size too) */
    int one_form;  /* each dtype in one form only, blocking or async, swapped
                    * between dtypes and from one world size to the next:
                    * halves the 1Mi+3 sweeps while each world still meets
                    * both dtypes and both forms */
    int p2p;
} sweep_arg;

/* Every collective for each count x dtype (x op) x {blocking, async}, then
 * send / recv for each count x dtype. */
static int body_sweep(comm *w, void *argp)
{
    const sweep_arg *a = argp;
    int p = comm_size(w), salt = 1 + p, round = 0;   /* salt: in place or not varies with p */
    for (int k = 0; k < a->ncounts; k++)
        for (int dt = 0; dt < 2; dt++)
            for (int op = 0; op < (a->ops_all ? 3 : 1); op++)
                for (int async = 0; async < 2; async++) {
                    if (a->one_form && async != ((dt + p) & 1))
                        continue;
                    comm_op o = (comm_op)(a->ops_all ? op : (round + p) % 3);
                    check_collectives(w, a->counts[k], (comm_dtype)dt, o, async, salt++);
                    round++;
                }
    if (a->p2p)
        for (int k = 0; k < a->ncounts; k++)
            for (int dt = 0; dt < 2; dt++)
                check_p2p(w, a->counts[k], (comm_dtype)dt, salt++);
    return 0;
}

/* Non-representable values: shm sums in rank order, so the result must equal
 * the sequential rank-order sum bit for bit, on every rank. */
static int body_rank_order(comm *w, void *argp)
{
    int p = comm_size(w), r = comm_rank(w);
    size_t n = 100003;
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)mix((uint32_t)(i * 31 + (size_t)r)) / 4294967296.0f * 3.3f - 1.1f;
    EXPECT_OK(w, comm_all_reduce(w, x, x, n, COMM_F32, COMM_SUM), "all_reduce");
    int tcp = strcmp(comm_transport(w), "tcp") == 0;
    for (size_t i = 0; i < n; i++) {
        float acc = 0;
        for (int q = 0; q < p; q++) {
            float v = (float)mix((uint32_t)(i * 31 + (size_t)q)) / 4294967296.0f * 3.3f - 1.1f;
            acc = q == 0 ? v : acc + v;
        }
        if (tcp ? fabsf(x[i] - acc) > 1e-5f : x[i] != acc) {
            fail("rank-order sum [%zu] = %.9g, want %.9g (%s)", i, x[i], acc, comm_transport(w));
            break;
        }
    }
    /* Every rank holds the same bits: gather a checksum of each and compare. */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h = (h ^ u) * 16777619u;
    }
    float mine = (float)(h >> 8), all[16];
    EXPECT_OK(w, comm_all_gather(w, &mine, all, (size_t)p, COMM_F32), "all_gather checksum");
    for (int q = 0; q < p; q++)
        if (all[q] != mine)
            fail("rank %d's all_reduce result differs from this rank's", q);
    free(x);
    return 0;
}

/* bf16 on the wire: an all_reduce of K elements in bf16 sends exactly half the
 * bytes of the same K in fp32 (comm_bytes_sent), and as many as the transport's
 * formula says: shm K e (the pieces the peers reduce, then the piece this rank
 * reduced), tcp (2K - own chunk - next rank's chunk) e = 2(p-1)/p K e when p
 * divides K (reduce_scatter sends every chunk but its own, all_gather every
 * chunk but its successor's). The bf16 result is the rank-order fp32 sum of
 * the bf16 inputs, rounded once, bit for bit, on both transports (so they
 * agree with each other too). K: shm's one-stage size and its chunked one. */
static int body_bf16_bytes(comm *w, void *argp)
{
    (void)argp;
    int p = comm_size(w), r = comm_rank(w), tcp = strcmp(comm_transport(w), "tcp") == 0;
    static const size_t counts[] = {1000, 100003};
    for (int k = 0; k < 2; k++) {
        size_t n = counts[k], off, len, noff, nlen;
        comm_chunk(n, p, r, &off, &len);
        comm_chunk(n, p, (r + 1) % p, &noff, &nlen);
        float *x = malloc(n * sizeof(float));
        uint16_t *h = malloc(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) {
            x[i] = (float)mix((uint32_t)(i * 31 + (size_t)r)) / 4294967296.0f * 3.3f - 1.1f;
            h[i] = to_bf16(x[i]);
        }
        EXPECT_OK(w, comm_barrier(w), "barrier");
        uint64_t b0 = comm_bytes_sent(w);
        EXPECT_OK(w, comm_all_reduce(w, x, x, n, COMM_F32, COMM_SUM), "all_reduce f32");
        uint64_t b1 = comm_bytes_sent(w);
        EXPECT_OK(w, comm_all_reduce(w, h, h, n, COMM_BF16, COMM_SUM), "all_reduce bf16");
        uint64_t b2 = comm_bytes_sent(w);
        uint64_t f32 = b1 - b0, bf = b2 - b1;
        uint64_t elems = tcp ? 2 * n - len - nlen : n;
        if (f32 != elems * 4 || bf != elems * 2 || 2 * bf != f32)
            fail("%s p=%d K=%zu: sent %llu bytes in fp32, %llu in bf16; want %llu and %llu",
                 comm_transport(w), p, n, (unsigned long long)f32, (unsigned long long)bf,
                 (unsigned long long)(elems * 4), (unsigned long long)(elems * 2));
        else if (r == 0)
            printf("# %s p=%d K=%zu: rank 0 sent %llu bytes fp32, %llu bf16 (ratio %.3f)\n",
                   comm_transport(w), p, n, (unsigned long long)f32, (unsigned long long)bf,
                   (double)bf / (double)f32);
        for (size_t i = 0; i < n; i++) {
            float acc = 0;
            for (int q = 0; q < p; q++) {
                float v = from_bf16(to_bf16((float)mix((uint32_t)(i * 31 + (size_t)q)) /
                                            4294967296.0f * 3.3f - 1.1f));
                acc = q == 0 ? v : acc + v;
            }
            if (h[i] != to_bf16(acc)) {
                fail("%s bf16 all_reduce [%zu] = 0x%04x, want 0x%04x (rank-order fp32 sum, "
                     "rounded once)", comm_transport(w), i, h[i], to_bf16(acc));
                break;
            }
        }
        free(x);
        free(h);
    }
    return 0;
}

/* Async and blocking calls mixed on one communicator keep their order. */
static int body_order(comm *w, void *argp)
{
    int p = comm_size(w), r = comm_rank(w);
    float a[64], b[64], c1[64];
    for (int i = 0; i < 64; i++)
        a[i] = (float)(r + 1), b[i] = (float)(2 * r + 1), c1[i] = (float)r;
    comm_req *q1, *q2;
    EXPECT_OK(w, comm_all_reduce_async(w, a, a, 64, COMM_F32, COMM_SUM, &q1), "async 1");
    EXPECT_OK(w, comm_all_reduce_async(w, b, b, 64, COMM_F32, COMM_MAX, &q2), "async 2");
    EXPECT_OK(w, comm_all_reduce(w, c1, c1, 64, COMM_F32, COMM_SUM), "blocking after async");
    EXPECT_OK(w, comm_wait(q2), "wait 2");
    EXPECT_OK(w, comm_wait(q1), "wait 1");
    if (a[5] != (float)(p * (p + 1) / 2) || b[5] != (float)(2 * p - 1) ||
        c1[5] != (float)(p * (p - 1) / 2))
        fail("mixed order: %g %g %g", a[5], b[5], c1[5]);
    /* A send / recv count mismatch is an error on the receiver, not garbage. */
    if (p >= 2 && r < 2) {
        float buf[8] = {0};
        if (r == 0) {
            comm_send(w, buf, 8, COMM_F32, 1);
        } else {
            int rc = comm_recv(w, buf, 4, COMM_F32, 0);
            if (rc != COMM_EINVAL || !strstr(comm_last_error(w), "expected 16"))
                fail("count mismatch: rc %d: %s", rc, comm_last_error(w));
        }
    }
    return 0;
}

/* Groups from a mesh: world 8 = dp2 x pp2 x tp2. */
static int body_mesh(comm *w, void *argp)
{
    mesh m;
    char err[600];
    int rank = comm_rank(w);
    if (mesh_init(&m, 2, 2, 2, err, sizeof err) != 0) {
        fail("mesh_init: %s", err);
        return 1;
    }
    mesh_comms mc;
    int rc = mesh_comms_create(&m, w, &mc, err, sizeof err);
    if (rc != COMM_OK) {
        fail("mesh_comms_create: %s", err);
        return 1;
    }
    struct { comm *c; mesh_dim dim; const char *name; } g[] = {
        {mc.tp, MESH_TP, "tp"}, {mc.dp, MESH_DP, "dp"}, {mc.pp, MESH_PP, "pp"},
        {mc.dp_tp, MESH_DP_TP, "dp_tp"},
    };
    for (int k = 0; k < 4; k++) {
        int members[8];
        int n = mesh_group(&m, rank, g[k].dim, members);
        float x[5];
        for (int i = 0; i < 5; i++)
            x[i] = (float)(rank + 1) * (float)(i + 1);
        EXPECT_OK(g[k].c, comm_all_reduce(g[k].c, x, x, 5, COMM_F32, COMM_SUM), g[k].name);
        float want = 0;
        for (int i = 0; i < n; i++)
            want += (float)(members[i] + 1);
        if (comm_size(g[k].c) != n || comm_world_rank(g[k].c, comm_rank(g[k].c)) != rank ||
            x[2] != want * 3)
            fail("%s group: size %d (want %d), sum %g (want %g)", g[k].name, comm_size(g[k].c),
                 n, x[2], want * 3);
        check_collectives(g[k].c, 7, COMM_BF16, COMM_AVG, k & 1, 40 + k);
    }
    /* pipeline neighbours exchange along pp */
    check_p2p(mc.pp, 1000, COMM_F32, 50);
    mesh_comms_destroy(&mc);
    return 0;
}

/* Two simulated nodes: the world goes over tcp, a group inside a node over shm. */
static int body_two_nodes(comm *w, void *argp)
{
    int r = comm_rank(w), p = comm_size(w);
    if (strcmp(comm_transport(w), "tcp") != 0)
        fail("world over two nodes uses %s, want tcp", comm_transport(w));
    int half = p / 2, members[8];
    for (int i = 0; i < half; i++)
        members[i] = (r < half ? 0 : half) + i;
    comm *local;
    char err[600];
    if (comm_group(w, members, half, &local, err, sizeof err) != COMM_OK) {
        fail("local group: %s", err);
        return 1;
    }
    if (strcmp(comm_transport(local), "shm") != 0)
        fail("group inside a node uses %s, want shm", comm_transport(local));
    check_collectives(local, 1000, COMM_F32, COMM_SUM, 0, 60);
    check_collectives(w, 1000, COMM_F32, COMM_SUM, 1, 61);
    comm_destroy(local);
    return 0;
}

/* A peer is SIGKILLed while everyone loops on all_reduce: every survivor must
 * fail within the timeout, naming a rank, and stay failed. */
static int body_killed(comm *w, void *argp)
{
    const char *victim = argp;
    size_t n = 1 << 16;
    float *x = calloc(n, sizeof(float));
    double start = now_s();
    for (;;) {
        double t = now_s();
        int rc = comm_all_reduce(w, x, x, n, COMM_F32, COMM_SUM);
        double took = now_s() - t;
        if (rc == COMM_OK) {
            if (now_s() - start > 20) {
                fail("no error 20 s after the kill");
                break;
            }
            continue;
        }
        const char *e = comm_last_error(w);
        if (rc != COMM_EPEER && rc != COMM_ETIMEOUT)
            fail("rc %d: %s", rc, e);
        if (took > TIMEOUT_S + 1.0)
            fail("the failing call took %.2f s (timeout %.1f): %s", took, TIMEOUT_S, e);
        if (!strstr(e, victim) && !strstr(e, "rank "))
            fail("error does not name a rank: %s", e);
        if (strcmp(comm_transport(w), "shm") == 0 && !strstr(e, victim))
            fail("shm error does not name the dead %s: %s", victim, e);
        if (comm_rank(w) == 0)
            printf("# survivor's error: %s\n", e);
        if (comm_barrier(w) != COMM_EBROKEN)
            fail("the next call after the failure did not fail as broken");
        break;
    }
    free(x);
    return 0;
}

/* Rank 1 is alive but never joins the barrier: the others time out naming it;
 * when it finally calls, it fails at once instead of waiting. */
#define SILENT_TIMEOUT_S 1.0

static int body_silent(comm *w, void *argp)
{
    comm_set_timeout(w, SILENT_TIMEOUT_S);
    if (comm_rank(w) == 1) {
        usleep((useconds_t)((SILENT_TIMEOUT_S + 0.7) * 1e6));
        double t = now_s();
        int rc = comm_barrier(w);
        if (rc == COMM_OK || now_s() - t > 1.0)
            fail("late rank: rc %d after %.2f s", rc, now_s() - t);
        return 0;
    }
    double t = now_s();
    int rc = comm_barrier(w);
    double took = now_s() - t;
    /* shm: everyone waits on rank 1 directly. tcp: a ring neighbour of rank 1
     * times out on it and drops its links, so the rank beyond sees that
     * neighbour go (and names it) at the same moment. */
    int strict = strcmp(comm_transport(w), "shm") == 0;
    const char *e = comm_last_error(w);
    if (strict ? (rc != COMM_ETIMEOUT || !strstr(e, "rank 1"))
               : ((rc != COMM_ETIMEOUT && rc != COMM_EPEER) || !strstr(e, "rank ")))
        fail("silent peer: rc %d: %s", rc, e);
    if (comm_rank(w) == 0)
        printf("# rank 0's error: %s\n", e);
    if (took < SILENT_TIMEOUT_S - 0.2 || took > SILENT_TIMEOUT_S + 1.0)
        fail("timed out after %.2f s, timeout %.1f", took, SILENT_TIMEOUT_S);
    return 0;
}

/* A p2p recv from a rank that dies. */
static int body_p2p_dead(comm *w, void *argp)
{
    if (comm_rank(w) == 1)
        _exit(0);   /* dies without a word */
    float x[4];
    double t = now_s();
    int rc = comm_recv(w, x, 4, COMM_F32, 1);
    if ((rc != COMM_EPEER && rc != COMM_ETIMEOUT) || !strstr(comm_last_error(w), "rank 1") ||
        now_s() - t > TIMEOUT_S + 1.0)
        fail("recv from a dead peer: rc %d after %.2f s: %s", rc, now_s() - t,
             comm_last_error(w));
    return 0;
}

/* ---- all_to_allv ---- */

/* Elements rank s sends rank d in round k: uneven, zeros included (about one
 * pair in five), scaled by `unit` (1 for the small sweep, ~40k to span many
 * shm staging entries). */
static size_t a2a_count(int s, int d, int k, size_t unit)
{
    uint32_t h = mix((uint32_t)(s * 131 + d * 17 + k * 7919 + 1));
    return (h % 5 == 0) ? 0 : (size_t)(h % 97) * unit + (h >> 8) % 13;
}

/* Word i of the piece s -> d: raw bits, NaN patterns and all (nothing is
 * reduced, so the bytes must arrive exactly). */
static uint32_t a2a_word(int s, int d, int k, size_t i)
{
    return mix((uint32_t)(s * 1000003u) ^ mix((uint32_t)(d * 7777u + (uint32_t)k)) ^ mix((uint32_t)i + 0x9e37u));
}

static void a2a_put(comm_dtype dt, char *buf, size_t i, uint32_t w)
{
    if (dt == COMM_F32)
        memcpy(buf + 4 * i, &w, 4);
    else {
        uint16_t h = (uint16_t)(w ^ (w >> 16));
        memcpy(buf + 2 * i, &h, 2);
    }
}

typedef struct {
    size_t unit;
    int rounds;
} a2a_arg;

/* Rounds of all_to_allv with uneven counts, f32 and bf16, blocking and
 * asynchronous (the asynchronous one in flight across an all_reduce on the
 * same communicator: collectives keep issue order), each result compared
 * byte for byte with the pieces the senders made; then all_to_all. */
static int body_all_to_allv(comm *w, void *argp)
{
    const a2a_arg *a = argp;
    int p = comm_size(w), r = comm_rank(w);
    size_t *sc = calloc((size_t)p, sizeof *sc), *rc = calloc((size_t)p, sizeof *rc);
    for (int k = 0; k < a->rounds; k++) {
        comm_dtype dt = (comm_dtype)(k & 1);
        int async = (k >> 1) & 1;
        size_t es = comm_dtype_size(dt), ns = 0, nr = 0;
        for (int q = 0; q < p; q++) {
            sc[q] = a2a_count(r, q, k, a->unit);
            rc[q] = a2a_count(q, r, k, a->unit);
            ns += sc[q], nr += rc[q];
        }
        char *send = scratch(0, ns * es), *recv = scratch(1, nr * es), *want = scratch(2, nr * es);
        size_t o = 0;
        for (int q = 0; q < p; q++)
            for (size_t i = 0; i < sc[q]; i++)
                a2a_put(dt, send, o++, a2a_word(r, q, k, i));
        o = 0;
        for (int q = 0; q < p; q++)
            for (size_t i = 0; i < rc[q]; i++)
                a2a_put(dt, want, o++, a2a_word(q, r, k, i));
        memset(recv, 0xa5, nr * es);
        char what[96];
        snprintf(what, sizeof what, "all_to_allv round %d %s %s p=%d", k, dt_name(dt), async ? "async" : "sync", p);
        if (async) {
            comm_req *q1 = NULL, *q2 = NULL;
            float one = 1.0f, sum = 0.0f;
            EXPECT_OK(w, comm_all_to_allv_async(w, send, sc, recv, rc, dt, &q1), what);
            EXPECT_OK(w, comm_all_reduce_async(w, &one, &sum, 1, COMM_F32, COMM_SUM, &q2), what);
            EXPECT_OK(w, comm_wait(q1), what);
            EXPECT_OK(w, comm_wait(q2), what);
            if (sum != (float)p)
                fail("%s: the all_reduce behind it gave %g", what, sum);
        } else {
            EXPECT_OK(w, comm_all_to_allv(w, send, sc, recv, rc, dt), what);
        }
        if (memcmp(recv, want, nr * es) != 0) {
            size_t i = 0;
            while (recv[i] == want[i])
                i++;
            fail("%s: byte %zu of %zu differs", what, i, nr * es);
        }
    }
    /* equal pieces */
    size_t n = 1000 + 3 * a->unit;
    uint32_t *s32 = (uint32_t *)scratch(0, (size_t)p * n * 4), *r32 = (uint32_t *)scratch(1, (size_t)p * n * 4);
    for (int q = 0; q < p; q++)
        for (size_t i = 0; i < n; i++)
            s32[(size_t)q * n + i] = a2a_word(r, q, 99, i);
    EXPECT_OK(w, comm_all_to_all(w, s32, r32, n, COMM_F32), "all_to_all");
    for (int q = 0; q < p; q++)
        for (size_t i = 0; i < n; i++)
            if (r32[(size_t)q * n + i] != a2a_word(q, r, 99, i)) {
                fail("all_to_all: from rank %d element %zu wrong", q, i);
                q = p;
                break;
            }
    free(sc);
    free(rc);
    return 0;
}

/* A receiver that expects another count than its peer sends: an error on
 * it, naming the mismatch, not a misplaced piece or a hang. */
static int body_all_to_allv_mismatch(comm *w, void *argp)
{
    int p = comm_size(w), r = comm_rank(w);
    size_t sc[8], rc[8];
    float send[64], recv[64];
    for (int q = 0; q < p; q++)
        sc[q] = rc[q] = 4;
    if (r == 0)
        rc[1] = 5;  /* rank 1 sends 4 */
    memset(send, 0, sizeof send);
    comm_set_timeout(w, TIMEOUT_S);
    int rc_ = comm_all_to_allv(w, send, sc, recv, rc, COMM_F32);
    if (r == 0 && (rc_ != COMM_EINVAL || !strstr(comm_last_error(w), "expected")))
        fail("rank 0 expected a count mismatch, got rc %d: '%s'", rc_, comm_last_error(w));
    return 0;
}

static void test_store_file(void)
{
    char dir[] = "/tmp/dtrun-test-store.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "store dir");
    char err[600];
    comm_store *s = store_file_open(dir, err, sizeof err);
    CHECK(s != NULL, "file store opens: %s", s ? "" : err);
    if (!s)
        return;
    char buf[64];
    CHECK(store_set(s, "a/b:c", "hello", 5) == 0, "set");
    long n = store_get(s, "a/b:c", buf, sizeof buf, 1.0);
    CHECK(n == 5 && memcmp(buf, "hello", 5) == 0, "get returns the value (%ld)", n);
    double t = now_s();
    n = store_get(s, "missing", buf, sizeof buf, 0.2);
    CHECK(n < 0 && now_s() - t < 1.0 && strstr(store_last_error(s), "missing"),
          "get of a missing key times out with its name: %s", store_last_error(s));
    long v = 0;
    CHECK(store_add(s, "cnt", 5, &v) == 0 && v == 5, "add from nothing");
    CHECK(store_add(s, "cnt", -2, &v) == 0 && v == 3, "add again");
    n = store_get(s, "cnt", buf, sizeof buf - 1, 1.0);
    buf[n > 0 ? n : 0] = 0;
    CHECK(n > 0 && strcmp(buf, "3") == 0, "add's counter reads as text");
    t = now_s();
    CHECK(store_barrier(s, "lonely", 2, 0.2) != 0 && now_s() - t < 1.0,
          "barrier short of members times out: %s", store_last_error(s));
    CHECK(store_barrier(s, "alone", 1, 0.2) == 0, "barrier of one passes");
    char big[STORE_VALUE_MAX + 1];
    memset(big, 'x', sizeof big);
    CHECK(store_set(s, "big", big, sizeof big) != 0, "oversized value refused");
    store_close(s);
    setenv("DTRUN_STORE", "bogus", 1);
    dt_env_reload();
    CHECK(store_open_env(err, sizeof err) == NULL && strstr(err, "bogus"),
          "bad DTRUN_STORE is an error: %s", err);
    unsetenv("DTRUN_STORE");
    dt_env_reload();
    rm_tree(dir);
}

static void test_chunk_and_self(void)
{
    size_t off, len;
    comm_chunk(7, 4, 3, &off, &len);
    CHECK(off == 6 && len == 1, "chunk of 7 over 4: last rank gets [6,7)");
    comm_chunk(1, 4, 2, &off, &len);
    CHECK(off == 1 && len == 0, "chunk of 1 over 4: rank 2 empty");
    comm_chunk(10, 3, 1, &off, &len);
    CHECK(off == 4 && len == 4, "chunk of 10 over 3: rank 1 gets [4,8)");
    /* A world of one needs no store and copies. */
    comm *w;
    char err[600];
    CHECK(comm_world_init_with(&w, NULL, 0, 1, NULL, err, sizeof err) == COMM_OK,
          "world of one without a store: %s", err);
    float a[3] = {1, 2, 3}, b[3];
    CHECK(comm_all_reduce(w, a, b, 3, COMM_F32, COMM_AVG) == COMM_OK && b[2] == 3,
          "all_reduce in a world of one copies");
    CHECK(strcmp(comm_transport(w), "self") == 0, "transport self");
    CHECK(comm_send(w, a, 3, COMM_F32, 0) == COMM_EINVAL && strstr(comm_last_error(w), "peer"),
          "send to self is an error: %s", comm_last_error(w));
    CHECK(comm_barrier(w) == COMM_EBROKEN, "a communicator that failed stays failed");
    comm_destroy(w);
    CHECK(comm_world_init_with(&w, NULL, 0, 2, NULL, err, sizeof err) != COMM_OK &&
              strstr(err, "store"), "world of two without a store: %s", err);
    CHECK(comm_world_init_with(&w, NULL, 3, 2, NULL, err, sizeof err) == COMM_EINVAL,
          "rank outside the world: %s", err);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    test_chunk_and_self();
    test_store_file();

    /* Every world 1-8 on shm (one host): counts 0, 1, 7 (fewer elements than
     * ranks: empty chunks) and 1000, every op, both dtypes, both forms. */
    world_opts shm = {.kill_rank = -1, .deadline_s = 60};
    sweep_arg small = {small_counts, 4, 1, 0, 1};
    for (int p = 1; p <= 8; p++) {
        sweep_arg a = small;
        if (p >= 7 && UNDER_ASAN)
            a.ops_all = 0;   /* keep the sanitizer twin quick on 2 cores */
        int rc = run_world(p, &shm, body_sweep, &a);
        CHECK(rc == 0, "shm world %d: every collective, counts 0/1/7/1000, f32+bf16, %s, "
              "sync+async, send/recv (%d failed)", p, a.ops_all ? "sum/avg/max" : "ops rotating",
              rc);
    }
    /* 1Mi+3: many shm staging entries per call, a ragged last chunk. Every
     * world in the normal build; the sanitizer twin keeps one, two, an odd and
     * the largest world. */
    static const size_t big[] = {(1u << 20) + 3};
    sweep_arg large = {big, 1, 0, 1, 1};
    for (int p = 1; p <= 8; p++) {
        if (UNDER_ASAN && p != 1 && p != 2 && p != 5 && p != 8)
            continue;
        int rc = run_world(p, &shm, body_sweep, &large);
        CHECK(rc == 0, "shm world %d: 1Mi+3 elements, every collective, f32 %s + bf16 %s, "
              "send/recv (%d failed)", p, p & 1 ? "async" : "sync", p & 1 ? "sync" : "async", rc);
    }
    /* The smallest entries and ring: chunks wrap the ring many times per call. */
    world_opts tight = {.kill_rank = -1, .deadline_s = 60,
                        .env = "DTRUN_COMM_SHM_DEPTH=2"};
    static const size_t mid[] = {300001};
    sweep_arg mid_arg = {mid, 1, 0, 0, 1};
    CHECK(run_world(3, &tight, body_sweep, &mid_arg) == 0,
          "shm world 3, ring depth 2: 300001 elements, every collective");
    CHECK(run_world(3, &shm, body_rank_order, NULL) == 0,
          "shm all_reduce sums in rank order, same bits on every rank");
    CHECK(run_world(4, &shm, body_order, NULL) == 0,
          "async and blocking calls keep issue order; send/recv count mismatch is an error");
    CHECK(run_world(8, &shm, body_mesh, NULL) == 0,
          "mesh dp2 x pp2 x tp2: tp/dp/pp/dp_tp groups reduce over the right members");

    world_opts tcp = {.transport = "tcp", .kill_rank = -1, .deadline_s = 60};
    /* TCP too for every world 2-8 (the ring's chunks wrap differently for
     * each size); the sanitizer twin keeps an even, an odd and the largest. */
    for (int p = 2; p <= 8; p++) {
        if (UNDER_ASAN && p != 2 && p != 5 && p != 8)
            continue;
        int rc = run_world(p, &tcp, body_sweep, &small);
        CHECK(rc == 0, "tcp world %d: every collective, counts 0/1/7/1000, f32+bf16, sum/avg/max, "
              "sync+async, send/recv (%d failed)", p, rc);
    }
    CHECK(run_world(3, &tcp, body_sweep, &large) == 0, "tcp world 3: 1Mi+3 elements");
    CHECK(run_world(3, &tcp, body_rank_order, NULL) == 0, "tcp all_reduce: same bits on every rank");
    for (int p = 2; p <= 4; p += 2) {
        CHECK(run_world(p, &shm, body_bf16_bytes, NULL) == 0,
              "shm world %d: all_reduce of K = 1000 and 100003 elements sends K*4 bytes per rank "
              "in fp32, exactly half in bf16; bf16 = rank-order fp32 sum rounded once", p);
        CHECK(run_world(p, &tcp, body_bf16_bytes, NULL) == 0,
              "tcp world %d: all_reduce of K = 1000 and 100003 elements sends 2(p-1)/p*K*4 bytes per "
              "rank in fp32, exactly half in bf16; bf16 = rank-order fp32 sum rounded once (= shm)", p);
    }
    /* all_to_allv: uneven counts with zeros, bitwise, every world on shm and
     * tcp (the sanitizer twin keeps a few), small and ~40k-element pieces */
    a2a_arg a2a_small = {1, 8}, a2a_big = {40000, 4};
    for (int p = 1; p <= 8; p++) {
        if (UNDER_ASAN && p != 1 && p != 3 && p != 8)
            continue;
        CHECK(run_world(p, &shm, body_all_to_allv, &a2a_small) == 0,
              "shm world %d: all_to_allv, uneven counts with zeros, f32+bf16, sync+async, bitwise; all_to_all", p);
        if (p >= 2)
            CHECK(run_world(p, &tcp, body_all_to_allv, &a2a_small) == 0,
                  "tcp world %d: all_to_allv, uneven counts with zeros, f32+bf16, sync+async, bitwise; all_to_all", p);
    }
    CHECK(run_world(4, &shm, body_all_to_allv, &a2a_big) == 0,
          "shm world 4: all_to_allv of pieces up to ~3.9M elements (many staging entries), bitwise");
    CHECK(run_world(3, &tcp, body_all_to_allv, &a2a_big) == 0,
          "tcp world 3: all_to_allv of pieces up to ~3.9M elements, bitwise");
    CHECK(run_world(2, &shm, body_all_to_allv_mismatch, NULL) == 0,
          "shm: all_to_allv whose receiver expects another count fails on it, naming the sizes");
    CHECK(run_world(3, &tcp, body_all_to_allv_mismatch, NULL) == 0,
          "tcp: all_to_allv whose receiver expects another count fails on it, naming the sizes");
    static const char *const two_nodes[] = {"n0", "n0", "n1", "n1"};
    world_opts split = {.nodes = two_nodes, .kill_rank = -1, .deadline_s = 60};
    CHECK(run_world(4, &split, body_two_nodes, NULL) == 0,
          "two nodes: world over tcp, a node's group over shm");

    /* The KV store of a real rendezvous daemon, in a process of its own: its
     * thread must not be half-copied into the forked ranks. */
    int port = start_kv_daemon();
    CHECK(port > 0, "rendezvous daemon starts");
    if (port > 0) {
        snprintf(kv_endpoint, sizeof kv_endpoint, "127.0.0.1:%d", port);
        world_opts kv = {.use_kv = 1, .kill_rank = -1, .deadline_s = 60};
        CHECK(run_world(8, &kv, body_mesh, NULL) == 0,
              "bootstrap through the daemon's KV store: world 8 and its mesh groups");
    }
    stop_kv_daemon();

    /* Failures. */
    world_opts kill_shm = {.kill_rank = 2, .deadline_s = 30};
    CHECK(run_world(4, &kill_shm, body_killed, "rank 2") == 0,
          "shm: rank 2 SIGKILLed mid-all_reduce: every survivor fails within the timeout, "
          "naming it");
    world_opts kill_tcp = {.transport = "tcp", .kill_rank = 2, .deadline_s = 30};
    CHECK(run_world(4, &kill_tcp, body_killed, "rank 2") == 0,
          "tcp: rank 2 SIGKILLed mid-all_reduce: every survivor fails within the timeout");
    CHECK(run_world(3, &shm, body_silent, NULL) == 0,
          "shm: a silent peer times out naming it; it fails at once when it comes");
    world_opts silent_tcp = {.transport = "tcp", .kill_rank = -1, .deadline_s = 30};
    CHECK(run_world(3, &silent_tcp, body_silent, NULL) == 0,
          "tcp: a silent peer times out naming it");
    CHECK(run_world(2, &shm, body_p2p_dead, NULL) == 0, "shm: recv from a dead peer fails");
    CHECK(run_world(2, &tcp, body_p2p_dead, NULL) == 0, "tcp: recv from a dead peer fails");
    CHECK_DONE();
}
