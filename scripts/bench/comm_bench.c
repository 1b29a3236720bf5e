/* comm_bench.c — times dtrun's collectives, nccl-tests style.
 *
 * Run one process per rank with the torchrun environment (RANK, WORLD_SIZE) and
 * a store (DTRUN_STORE=file:DIR, or the KV env under bin/dtrun); rank 0 prints
 *   size  count  type  time(us)  algbw(GB/s)  busbw(GB/s)  sent(B)  formula(B)
 * busbw follows nccl-tests: all_reduce algbw * 2(n-1)/n, reduce_scatter,
 * all_gather and all_to_all(v) algbw * (n-1)/n, broadcast algbw. all_to_all
 * sends size/n bytes to every rank; all_to_allv splits the same size bytes
 * unevenly, as a mixture of experts' router does (rank r gives rank q a share
 * proportional to 1 + (r + 2q) mod n: some peers get several times others'),
 * size then being what each rank sends, its own piece included. sent: the bytes rank 0 put on
 * the wire per call (comm_bytes_sent around each timed call, barriers not
 * counted; 0 under NCCL, which does not say); formula: what the all_reduce
 * algorithm should send, 2(n-1)/n count e on tcp (exactly: every chunk but
 * its own, then every chunk but its successor's) and count e on shm; a line
 * whose counter disagrees says so and the program exits 1.
 *
 *   comm_bench [--op all_reduce|reduce_scatter|all_gather|broadcast|all_to_all|all_to_allv]
 *              [--sizes 1M,16M,64M | --counts 256K,4M,16M] [--iters N] [--warmup N]
 *              [--dtype fp32|bf16] [--async] [--device]
 * Sizes are bytes, counts elements (K, M, G suffixes: powers of 1024): the
 * same --counts in both dtypes move the same elements, bf16 in half the
 * bytes. Each size reports the median of --iters timed calls, each call
 * bracketed by barriers so ranks start together.
 * --device: buffers on the GPU (LOCAL_RANK % count, as the trainer picks it):
 * NCCL when every rank has a GPU of its own (or DTRUN_COMM_BACKEND=nccl),
 * else the CPU transport with host staging; see runtime/comm/comm_nccl.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ops.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/store.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

/* all_to_allv's split: what rank s sends rank d out of n elements per rank
 * (every rank computes every rank's, so receive counts agree). */
static size_t a2a_share(size_t n, int p, int s, int d)
{
    size_t w = 0, mine = 0;
    for (int q = 0; q < p; q++) {
        size_t wq = 1 + (size_t)((s + 2 * q) % p);
        w += wq;
        if (q == d)
            mine = wq;
    }
    size_t base = n / w * mine;
    return d == p - 1 ? n - (n / w) * (w - mine) : base; /* the last takes the remainder */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *op = "all_reduce", *sizes = "1M,16M,64M";
    int as_counts = 0, mismatch = 0;
    int iters = 20, warmup = 3, async = 0, device = 0;
    comm_dtype dt = COMM_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--op") && i + 1 < argc)
            op = argv[++i];
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            sizes = argv[++i], as_counts = 0;
        else if (!strcmp(argv[i], "--counts") && i + 1 < argc)
            sizes = argv[++i], as_counts = 1;
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            const char *d = argv[++i];
            if (!strcmp(d, "bf16"))
                dt = COMM_BF16;
            else if (!strcmp(d, "fp32") || !strcmp(d, "f32"))
                dt = COMM_F32;
            else {
                fprintf(stderr, "comm_bench: --dtype %s: fp32 or bf16\n", d);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--async"))
            async = 1;
        else if (!strcmp(argv[i], "--device"))
            device = 1;
        else {
            fprintf(stderr, "usage: comm_bench [--op OP] [--sizes LIST | --counts LIST] [--iters N] "
                            "[--warmup N] [--dtype fp32|bf16] [--async] [--device]\n");
            return 2;
        }
    }
    if (iters < 1)
        iters = 1;
    char err[600];
    const dt_ops *ops = NULL;
    if (device) {
        const char *lr = getenv("LOCAL_RANK");
        if (!(ops = dt_ops_select(DT_DEVICE_CUDA, lr ? atoi(lr) : 0, err, sizeof err))) {
            fprintf(stderr, "comm_bench: %s\n", err);
            return 1;
        }
    }
    comm_store *st = NULL;
    const char *ws = getenv("WORLD_SIZE");
    if (ws && atoi(ws) > 1 && !(st = store_open_env(err, sizeof err))) {
        fprintf(stderr, "comm_bench: %s\n", err);
        return 1;
    }
    comm_set_ops(ops);  /* NULL (no --device): host buffers, CPU transports */
    comm *w;
    if (comm_world_init(&w, st, err, sizeof err) != COMM_OK) {
        fprintf(stderr, "comm_bench: %s\n", err);
        return 1;
    }
    int p = comm_size(w), r = comm_rank(w);
    size_t es = comm_dtype_size(dt);
    double factor = !strcmp(op, "all_reduce") ? 2.0 * (p - 1) / p
                  : !strcmp(op, "broadcast") ? 1.0
                                             : (double)(p - 1) / p;
    if (r == 0) {
        printf("# dtrun %s, %d ranks, transport %s, dtype %s%s%s\n", op, p, comm_transport(w),
               dt == COMM_F32 ? "f32" : "bf16", async ? ", async" : "",
               device ? ", device buffers" : "");
        printf("%12s %12s %6s %12s %12s %12s %12s %12s\n", "size(B)", "count", "type", "time(us)",
               "algbw(GB/s)", "busbw(GB/s)", "sent(B)", "formula(B)");
    }
    char *list = strdup(sizes);
    int rc = 0;
    for (char *tok = strtok(list, ","); tok && rc == 0; tok = strtok(NULL, ",")) {
        size_t bytes = parse_size(tok), n = as_counts ? bytes : bytes / es;
        char *a = malloc(n * es + 64), *b = malloc(n * es + 64);
        /* Touch every page first: a first touch costs more than the collective. */
        memset(a, 0, n * es + 64);
        memset(b, 0, n * es + 64);
        for (size_t i = 0; i < n && dt == COMM_F32; i++)
            ((float *)a)[i] = (float)(i % 7);
        char *ha = a, *hb = b;
        if (ops) { /* the same contents, on the device */
            a = ops->alloc(n * es + 64);
            b = ops->alloc(n * es + 64);
            if (!a || !b) {
                fprintf(stderr, "comm_bench: rank %d: out of device memory for %zu bytes\n", r, n * es);
                rc = 1;
                break;
            }
            ops->from_host(a, ha, n * es + 64);
        }
        size_t *sc = calloc((size_t)p, sizeof *sc), *rcn = calloc((size_t)p, sizeof *rcn);
        for (int q = 0; q < p; q++) {
            int v = !strcmp(op, "all_to_allv");
            sc[q] = v ? a2a_share(n, p, r, q) : n / (size_t)p;
            rcn[q] = v ? a2a_share(n, p, q, r) : n / (size_t)p;
        }
        size_t nrecv = 0;
        for (int q = 0; q < p; q++)
            nrecv += rcn[q];
        if (nrecv > n) { /* uneven: a rank may receive more than it sends */
            free(hb);
            hb = calloc(1, nrecv * es + 64);
            if (ops) {
                ops->free(b);
                b = ops->alloc(nrecv * es + 64);
            } else {
                b = hb;
            }
        }
        double *t = malloc((size_t)iters * sizeof(double));
        uint64_t sent = 0;
        for (int k = -warmup; k < iters && rc == 0; k++) {
            rc = comm_barrier(w);
            uint64_t b0 = comm_bytes_sent(w);
            double t0 = now_s();
            comm_req *req = NULL;
            if (!strcmp(op, "all_reduce"))
                rc = async ? comm_all_reduce_async(w, a, b, n, dt, COMM_SUM, &req)
                           : comm_all_reduce(w, a, b, n, dt, COMM_SUM);
            else if (!strcmp(op, "reduce_scatter"))
                rc = comm_reduce_scatter(w, a, b, n, dt, COMM_SUM);
            else if (!strcmp(op, "all_gather"))
                rc = comm_all_gather(w, a, b, n, dt);
            else if (!strcmp(op, "broadcast"))
                rc = comm_broadcast(w, a, n, dt, 0);
            else if (!strcmp(op, "all_to_all") || !strcmp(op, "all_to_allv"))
                rc = async ? comm_all_to_allv_async(w, a, sc, b, rcn, dt, &req)
                           : comm_all_to_allv(w, a, sc, b, rcn, dt);
            else {
                fprintf(stderr, "comm_bench: unknown op %s\n", op);
                rc = 1;
            }
            if (rc == 0 && req)
                rc = comm_wait(req);
            if (k >= 0) {
                t[k] = now_s() - t0;
                sent += comm_bytes_sent(w) - b0;
            }
        }
        if (rc != 0) {
            fprintf(stderr, "comm_bench: rank %d: %s\n", r, comm_last_error(w));
        } else if (r == 0) {
            qsort(t, (size_t)iters, sizeof(double), cmp_double);
            double med = t[iters / 2], algbw = (double)(n * es) / med / 1e9;
            /* the all_reduce's bytes per rank by the algorithm (rank 0) */
            const char *tr = comm_transport(w);
            size_t o0, l0, o1, l1;
            comm_chunk(n, p, 0, &o0, &l0);
            comm_chunk(n, p, 1 % p, &o1, &l1);
            long long formula = strcmp(op, "all_reduce") || p == 1 ? -1
                              : !strcmp(tr, "tcp")                 ? (long long)((2 * n - l0 - l1) * es)
                              : !strcmp(tr, "shm")                 ? (long long)(n * es)
                                                                   : -1;
            unsigned long long per_call = (unsigned long long)(sent / (uint64_t)iters);
            int bad = formula >= 0 && sent != (uint64_t)formula * (uint64_t)iters;
            char fs[32] = "-";
            if (formula >= 0)
                snprintf(fs, sizeof fs, "%lld", formula);
            printf("%12zu %12zu %6s %12.1f %12.2f %12.2f %12llu %12s%s\n", n * es, n,
                   dt == COMM_F32 ? "float" : "bf16", med * 1e6, algbw, algbw * factor, per_call, fs,
                   bad ? "  COUNTER != FORMULA" : "");
            mismatch |= bad;
        }
        free(t);
        free(sc);
        free(rcn);
        if (ops) {
            ops->free(a);
            ops->free(b);
        }
        free(ha);
        free(hb);
    }
    free(list);
    comm_destroy(w);
    store_close(st);
    return rc == 0 && !mismatch ? 0 : 1;
}
