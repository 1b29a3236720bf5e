/* comm_nccl.c — the NCCL backend (see comm_nccl.h for what and why).
 *
 * Pieces, in order: the registry of live NCCL communicators and the one lock
 * every NCCL call takes; failing (abort everything, one line); settling a
 * non-blocking call; requests and their bounded wait; the watchdog thread;
 * creation and destruction; the send / recv lanes; the collectives.
 *
 * Locking: reg_mu guards the registry, each communicator's pending list, and
 * the validity of every ncclComm_t: the thread that drives a communicator
 * makes each (short, non-blocking) NCCL call with reg_mu held, and the
 * watchdog aborts with reg_mu held, so an abort never frees a handle that a
 * call is using. Waits poll with the lock released between polls. Lock order:
 * reg_mu, then a comm's err_mu (comm_fail).
 *
 * Recorded into a CUDA graph (train.cuda_graphs, comm.h): an operation
 * started while the compute stream is captured is captured with it: its
 * stream joins the capture through an event recorded on the compute stream
 * (ready_rec: an event used only while recording, never queried on the host;
 * CUDA refuses host queries of an event last recorded in a capture), and its
 * request is a "recorded" one: not in the pending list (neither the watchdog
 * nor a wait may query its event: it never happens until the graph is
 * launched), its wait one cudaStreamWaitEvent that joins the captured stream
 * back into the compute stream, which the capture needs before it ends. A
 * launched graph's collectives are then bounded by comm_wait_device: an
 * event on the compute stream after the launch, polled like a request. */
#include "runtime/comm/comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DTRUN_CUDA

#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <time.h>

#include "runtime/comm/comm_nccl_lib.h"

/* One direction of send / recv to one peer: a two-rank communicator (the
 * sender is its rank 0) and its stream. */
typedef struct {
    ncclComm_t nc;               /* NULL once aborted */
    cudaStream_t stream;
} nc_lane;

typedef struct nc_req nc_req;
typedef struct nc_state nc_state;

struct nc_state {
    comm *c;
    ncclComm_t nc;               /* NULL once aborted or destroyed */
    cudaStream_t stream;         /* collectives, in issue order */
    cudaEvent_t ready;           /* the compute stream's progress, per call */
    cudaEvent_t ready_rec;       /* the same while recording a graph (comm.h) */
    nc_lane **lanes;             /* [is_send * size + peer], made on first use */
    float *one;                  /* barrier's element on the device */
    nc_req *pending;             /* issued and not yet waited for */
    int aborted;
    nc_state *next;              /* registry */
};

struct nc_req {
    comm_req base;               /* first: the comm_req comm_wait gets back */
    nc_state *s;
    cudaEvent_t done;            /* recorded after the operation */
    cudaStream_t stream;         /* the stream it runs on */
    double deadline;             /* issue time + the communicator's timeout */
    int complete;                /* done was seen reached */
    int recorded;                /* started while recording a graph: done is a captured event */
    char label[160];
    /* host buffers staged through device memory: result back to host_dst */
    void *stage;                 /* device block, or NULL */
    void *host_dst;
    const void *stage_src;
    size_t stage_bytes;
    nc_req *next;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;
static nc_state *registry;
static int wd_running, wd_stop, wd_device;
static pthread_t wd_thread;

static double now_s(void) { return clock_now_s(); }

/* The ops table's queue (comm_set_ops): the stream every compute op runs on. */
static cudaStream_t compute_stream(void) { return (cudaStream_t)comm_compute_stream(); }

static ncclDataType_t nc_type(comm_dtype dt) { return dt == COMM_BF16 ? ncclBfloat16 : ncclFloat32; }

static ncclRedOp_t nc_op(comm_op op)
{
    return op == COMM_AVG ? ncclAvg : op == COMM_MAX ? ncclMax : ncclSum;
}

/* ---- failing: one line on the communicator, every NCCL communicator aborted ---- */

/* With reg_mu held. ncclCommAbort makes the kernels of every operation still
 * on the device return, so nothing waits for a dead peer any more — including
 * a device-wide synchronisation (cudaFree) elsewhere in the process. Abort
 * itself frees device memory, which waits for every kernel on the device: a
 * kernel of a communicator not aborted yet, stuck on the same dead peer, would
 * hold it forever. So where NCCL can (2.28+), every communicator is revoked
 * (its kernels stopped) before the first abort. */
static void abort_all_locked(const comm *origin)
{
    for (nc_state *s = registry; s && dt_nccl.comm_revoke; s = s->next) {
        if (s->nc)
            dt_nccl.comm_revoke(s->nc, NCCL_REVOKE_DEFAULT);
        for (int i = 0; s->lanes && i < 2 * s->c->size; i++)
            if (s->lanes[i] && s->lanes[i]->nc)
                dt_nccl.comm_revoke(s->lanes[i]->nc, NCCL_REVOKE_DEFAULT);
    }
    for (nc_state *s = registry; s; s = s->next) {
        if (s->nc)
            dt_nccl.comm_abort(s->nc);
        s->nc = NULL;
        for (int i = 0; s->lanes && i < 2 * s->c->size; i++)
            if (s->lanes[i] && s->lanes[i]->nc) {
                dt_nccl.comm_abort(s->lanes[i]->nc);
                s->lanes[i]->nc = NULL;
            }
        s->aborted = 1;
        if (s->c != origin)
            comm_fail(s->c, COMM_EBROKEN, "%s: NCCL aborted after an error elsewhere: %s",
                      s->c->name, origin ? comm_last_error(origin) : "?");
    }
}

/* Records the line (the first error wins), aborts everything; reg_mu held. */
static int fail_locked(nc_state *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_locked(nc_state *s, int code, const char *fmt, ...)
{
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    comm_fail(s->c, code, "%s", line);
    abort_all_locked(s->c);
    int st = atomic_load(&s->c->status);
    return st != COMM_OK ? st : code;
}

/* An NCCL error as a code and a line. */
static int fail_nccl_locked(nc_state *s, ncclComm_t nc, ncclResult_t r, const char *label)
{
    const char *last = dt_nccl.get_last_error ? dt_nccl.get_last_error(nc) : "";
    return fail_locked(s, r == ncclRemoteError ? COMM_EPEER : COMM_ESYS, "%s: nccl: %s%s%s",
                       label, dt_nccl.get_error_string(r), last && *last ? ": " : "",
                       last ? last : "");
}

static int fail_cuda_locked(nc_state *s, cudaError_t e, const char *label, const char *call)
{
    cudaGetLastError();
    return fail_locked(s, COMM_ESYS, "%s: cuda: %s: %s", label, call, cudaGetErrorString(e));
}

/* Every handle of s for an asynchronous error; reg_mu held. */
static int check_async_locked(nc_state *s, const char *label)
{
    if (s->aborted || atomic_load(&s->c->status) != COMM_OK)
        return atomic_load(&s->c->status) != COMM_OK ? atomic_load(&s->c->status) : COMM_EBROKEN;
    for (int i = -1; i < 2 * s->c->size; i++) {
        ncclComm_t nc = i < 0 ? s->nc : (s->lanes[i] ? s->lanes[i]->nc : NULL);
        if (!nc)
            continue;
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = dt_nccl.comm_get_async_error(nc, &st);
        if (r != ncclSuccess)
            return fail_nccl_locked(s, nc, r, label);
        if (st != ncclSuccess && st != ncclInProgress)
            return fail_nccl_locked(s, nc, st, label);
    }
    return COMM_OK;
}

/* A pause between polls: spin first (collectives of a few microseconds),
 * then sleep, up to a millisecond. */
static void backoff(int *polls)
{
    int n = (*polls)++;
    if (n < 200)
        return;
    long ns = n < 1000 ? 20000 : n < 3000 ? 200000 : 1000000;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* A non-blocking NCCL call answered ncclInProgress: poll until it settled, or
 * the deadline. Called without reg_mu; takes it per poll. */
static int settle(nc_state *s, ncclComm_t *ncp, double deadline, const char *label)
{
    int polls = 0;
    for (;;) {
        pthread_mutex_lock(&reg_mu);
        int rc;
        ncclResult_t st = ncclInProgress;
        if (!*ncp) {
            rc = atomic_load(&s->c->status) != COMM_OK ? atomic_load(&s->c->status) : COMM_EBROKEN;
        } else {
            ncclResult_t r = dt_nccl.comm_get_async_error(*ncp, &st);
            if (r != ncclSuccess)
                rc = fail_nccl_locked(s, *ncp, r, label);
            else if (st == ncclSuccess)
                rc = COMM_OK;
            else if (st != ncclInProgress)
                rc = fail_nccl_locked(s, *ncp, st, label);
            else if (now_s() > deadline)
                rc = fail_locked(s, COMM_ETIMEOUT,
                                 "%s: nccl: timed out after %.1f s (communicator aborted)", label,
                                 s->c->timeout);
            else
                rc = 1;
        }
        pthread_mutex_unlock(&reg_mu);
        if (rc != 1)
            return rc;
        backoff(&polls);
    }
}

/* ---- requests ---- */

static nc_req *req_new(nc_state *s, const char *label)
{
    nc_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    if (cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        free(r);
        return NULL;
    }
    r->s = s;
    r->deadline = now_s() + s->c->timeout;
    snprintf(r->label, sizeof r->label, "%s", label);
    return r;
}

/* Frees a request that is not (or no longer) in the pending list. Its device
 * staging is freed in stream order after whatever still runs on s->stream
 * (nothing, once it completed; an aborted kernel, after it returned). */
static void req_free(nc_req *r)
{
    if (r->stage)
        cudaFreeAsync(r->stage, r->stream ? r->stream : r->s->stream);
    cudaEventDestroy(r->done);  /* released once reached, if it is not yet */
    free(r);
}

/* reg_mu held: whether r is done (1), still running (0), or an error. */
static int poll_req_locked(nc_req *r, double now)
{
    nc_state *s = r->s;
    if (r->complete)
        return 1;
    int st = atomic_load(&s->c->status);
    if (st != COMM_OK || s->aborted)
        return st != COMM_OK ? st : COMM_EBROKEN;
    cudaError_t e = cudaEventQuery(r->done);
    if (e == cudaSuccess) {
        r->complete = 1;
        return 1;
    }
    if (e != cudaErrorNotReady)
        return fail_cuda_locked(s, e, r->label, "cudaEventQuery");
    int rc = check_async_locked(s, r->label);
    if (rc != COMM_OK)
        return rc;
    if (now > r->deadline)
        return fail_locked(s, COMM_ETIMEOUT,
                           "%s: nccl: timed out after %.1f s (communicator aborted: a peer is "
                           "slow, dead, or issued a different operation)",
                           r->label, s->c->timeout);
    return 0;
}

static void unlink_locked(nc_req *r)
{
    for (nc_req **p = &r->s->pending; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
}

/* A recorded request's wait (comm.h): the compute stream, still being
 * recorded, waits for the operation's stream in stream order, so the capture
 * holds the operation and joins its stream back. The join is made even when
 * the communicator broke meanwhile (the capture must end joined; the caller
 * does not launch what it recorded after a failure). */
static int recorded_wait(nc_req *r)
{
    nc_state *s = r->s;
    int rc = atomic_load(&s->c->status);
    cudaError_t e = cudaSuccess;
    if (!comm_dev_capturing()) {
        pthread_mutex_lock(&reg_mu);
        rc = fail_locked(s, COMM_EINVAL, "%s: recorded into a CUDA graph and waited for after the recording "
                         "ended (a request must be waited for before graph_end)", r->label);
        pthread_mutex_unlock(&reg_mu);
    } else if ((e = cudaStreamWaitEvent(compute_stream(), r->done, 0)) != cudaSuccess) {
        pthread_mutex_lock(&reg_mu);
        rc = fail_cuda_locked(s, e, r->label, "joining the recorded operation to the compute stream");
        pthread_mutex_unlock(&reg_mu);
    }
    req_free(r);
    return rc;
}

/* Waits for r (bounded by its deadline), joins the compute stream to it,
 * copies a staged result to the host, frees r. */
static int req_wait(nc_req *r)
{
    nc_state *s = r->s;
    int polls = 0, rc;
    if (r->recorded)
        return recorded_wait(r);
    for (;;) {
        pthread_mutex_lock(&reg_mu);
        rc = poll_req_locked(r, now_s());
        if (rc != 0)
            unlink_locked(r);
        pthread_mutex_unlock(&reg_mu);
        if (rc != 0)
            break;
        backoff(&polls);
    }
    if (rc == 1) {
        rc = COMM_OK;
        cudaStream_t cs = compute_stream();
        cudaError_t e = cudaStreamWaitEvent(cs, r->done, 0);
        if (e == cudaSuccess && r->host_dst) {
            e = cudaMemcpyAsync(r->host_dst, r->stage_src, r->stage_bytes, cudaMemcpyDeviceToHost,
                                cs);
            if (e == cudaSuccess)
                e = cudaStreamSynchronize(cs);
        }
        if (e != cudaSuccess) {
            pthread_mutex_lock(&reg_mu);
            rc = fail_cuda_locked(s, e, r->label, "joining the compute stream");
            pthread_mutex_unlock(&reg_mu);
        }
    }
    req_free(r);
    return rc;
}

/* ---- the watchdog: requests nobody waits for yet ---- */

static void *watchdog(void *arg)
{
    (void)arg;
    /* the runtime's current device is per thread: this one must query the
     * events on the device the communicators live on */
    cudaSetDevice(wd_device);
    pthread_mutex_lock(&reg_mu);
    while (!wd_stop) {
        double now = now_s();
        for (nc_state *s = registry; s; s = s->next) {
            if (s->aborted)
                continue;
            for (nc_req *r = s->pending; r; r = r->next)
                if (poll_req_locked(r, now) < 0)
                    break;
            if (!s->aborted && !s->pending)
                check_async_locked(s, s->c->name);
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&wd_cv, &reg_mu, &until);
    }
    pthread_mutex_unlock(&reg_mu);
    return NULL;
}

/* reg_mu held. */
static int register_locked(nc_state *s)
{
    s->next = registry;
    registry = s;
    if (wd_running)
        return COMM_OK;
    if (cudaGetDevice(&wd_device) != cudaSuccess) {
        cudaGetLastError();
        wd_device = 0;
    }
    wd_stop = 0;
    if (pthread_create(&wd_thread, NULL, watchdog, NULL) != 0)
        return fail_locked(s, COMM_ESYS, "%s: cannot start the NCCL watchdog thread", s->c->name);
    wd_running = 1;
    return COMM_OK;
}

/* Takes s out of the registry; stops the watchdog with the last one. */
static void unregister(nc_state *s)
{
    pthread_mutex_lock(&reg_mu);
    for (nc_state **p = &registry; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    int join = wd_running && !registry;
    if (join) {
        wd_stop = 1;
        wd_running = 0;
        pthread_cond_broadcast(&wd_cv);
    }
    pthread_mutex_unlock(&reg_mu);
    if (join)
        pthread_join(wd_thread, NULL);
}

/* ---- creation and destruction ---- */

static void nccl_probe(char *busid, size_t len, char *why, size_t whylen)
{
    busid[0] = '\0';
    if (!comm_dev_active()) {
        snprintf(why, whylen, "no CUDA device in use (train.device resolved to cpu)");
        return;
    }
    if (dt_nccl_load(why, whylen) != 0)
        return;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(busid, (int)len, dev) != cudaSuccess) {
        cudaGetLastError();
        busid[0] = '\0';
        snprintf(why, whylen, "cannot read the PCI bus id of CUDA device %d", dev);
    }
}

/* A new non-blocking NCCL communicator of n ranks; *ncp set before settling so
 * that an abort meanwhile finds it. */
static int init_comm(nc_state *s, ncclComm_t *ncp, int n, ncclUniqueId id, int rank,
                     const char *label)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = s->c->name;
    double deadline = now_s() + s->c->timeout;
    pthread_mutex_lock(&reg_mu);
    ncclComm_t h = NULL;
    ncclResult_t r = dt_nccl.comm_init_rank_config(&h, n, id, rank, &config);
    int rc = COMM_OK;
    if (r == ncclSuccess || r == ncclInProgress) {
        *ncp = h;  /* from here on abort_all may abort it */
    } else {
        rc = fail_nccl_locked(s, h, r, label);
        if (h)
            dt_nccl.comm_abort(h);
    }
    pthread_mutex_unlock(&reg_mu);
    if (rc != COMM_OK)
        return rc;
    return settle(s, ncp, deadline, label);
}

/* The unique id of a communicator: made by `maker`, the others read it from
 * the store under `key`. */
static int exchange_id(nc_state *s, int maker, const char *key, ncclUniqueId *id,
                       const char *label)
{
    comm *c = s->c;
    if (maker) {
        pthread_mutex_lock(&reg_mu);
        ncclResult_t r = dt_nccl.get_unique_id(id);
        int rc = r == ncclSuccess ? COMM_OK : fail_nccl_locked(s, NULL, r, label);
        pthread_mutex_unlock(&reg_mu);
        if (rc != COMM_OK || !key)
            return rc;
        if (store_set(c->store, key, id, sizeof *id) != 0)
            return comm_fail(c, COMM_ESTORE, "%s: publishing the NCCL id: %s", label,
                             store_last_error(c->store));
        return COMM_OK;
    }
    long n = store_get(c->store, key, id, sizeof *id, c->timeout);
    if (n != (long)sizeof *id)
        return comm_fail(c, COMM_ESTORE, "%s: no NCCL id from its maker within %.1f s: %s", label,
                         c->timeout, n < 0 ? store_last_error(c->store) : "wrong size");
    return COMM_OK;
}

static int nccl_create(comm *c)
{
    char why[256];
    if (dt_nccl_load(why, sizeof why) != 0)
        return comm_fail(c, COMM_ESYS, "%s: %s", c->name, why);
    if (!compute_stream())
        return comm_fail(c, COMM_EINVAL, "%s: NCCL needs a CUDA device in use (the CUDA ops set up)",
                         c->name);
    nc_state *s = calloc(1, sizeof *s);
    if (!s || !(s->lanes = calloc(2 * (size_t)c->size, sizeof *s->lanes))) {
        free(s);
        return comm_fail(c, COMM_ESYS, "%s: out of memory", c->name);
    }
    s->c = c;
    c->be_state = s;
    char label[160];
    snprintf(label, sizeof label, "%s: creating the NCCL communicator", c->name);
    if (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess) {
        s->stream = NULL;
        cudaGetLastError();
        return comm_fail(c, COMM_ESYS, "%s: cannot create a CUDA stream", label);
    }
    if (cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&s->ready_rec, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        return comm_fail(c, COMM_ESYS, "%s: cannot create a CUDA event", label);
    }
    pthread_mutex_lock(&reg_mu);
    int rc = register_locked(s);
    pthread_mutex_unlock(&reg_mu);
    if (rc != COMM_OK)
        return rc;
    char key[400];
    snprintf(key, sizeof key, "%s/nccl-id", c->id);
    ncclUniqueId id;
    rc = exchange_id(s, c->rank == 0, c->size > 1 ? key : NULL, &id, label);
    if (rc == COMM_OK)
        rc = init_comm(s, &s->nc, c->size, id, c->rank, label);
    return rc;
}

/* Finalizes (flushes) and destroys one handle, or aborts it when that fails. */
static void close_handle(nc_state *s, ncclComm_t *ncp, int healthy)
{
    if (!*ncp)
        return;
    if (healthy) {
        char label[160];
        snprintf(label, sizeof label, "%s: closing", s->c->name);
        ncclResult_t r = dt_nccl.comm_finalize(*ncp);
        int rc = r == ncclSuccess || r == ncclInProgress
                     ? settle(s, ncp, now_s() + s->c->timeout, label) : COMM_ESYS;
        if (rc == COMM_OK && *ncp) {
            dt_nccl.comm_destroy(*ncp);
            *ncp = NULL;
            return;
        }
    }
    if (*ncp)
        dt_nccl.comm_abort(*ncp);
    *ncp = NULL;
}

static void nccl_destroy(comm *c)
{
    nc_state *s = c->be_state;
    if (!s)
        return;
    /* out of the registry first: nobody else touches its handles after this */
    unregister(s);
    int healthy = !s->aborted && atomic_load(&c->status) == COMM_OK;
    close_handle(s, &s->nc, healthy);
    for (int i = 0; i < 2 * c->size; i++) {
        nc_lane *l = s->lanes[i];
        if (!l)
            continue;
        close_handle(s, &l->nc, healthy && atomic_load(&c->status) == COMM_OK);
        cudaStreamDestroy(l->stream);
        free(l);
    }
    /* requests never waited for (a contract breach): leaked with their memory */
    if (s->one)
        cudaFreeAsync(s->one, s->stream);
    if (s->ready)
        cudaEventDestroy(s->ready);
    if (s->ready_rec)
        cudaEventDestroy(s->ready_rec);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    cudaGetLastError();
    free(s->lanes);
    free(s);
    c->be_state = NULL;
}

/* ---- issuing ---- */

/* Orders `stream` after everything queued on the compute stream so far
 * (recording a graph: `stream` joins the capture there). */
static cudaError_t after_compute(nc_state *s, cudaStream_t stream, int recording)
{
    cudaEvent_t ev = recording ? s->ready_rec : s->ready;
    cudaError_t e = cudaEventRecord(ev, compute_stream());
    return e == cudaSuccess ? cudaStreamWaitEvent(stream, ev, 0) : e;
}

/* Host buffers: a device block of `bytes`, filled from `host` when `fill`,
 * queued on the compute stream (so after_compute orders it before the op). */
static void *stage_in(const void *host, size_t bytes, int fill, cudaError_t *e)
{
    void *d = NULL;
    cudaStream_t cs = compute_stream();
    *e = cudaMallocAsync(&d, bytes ? bytes : 4, cs);
    if (*e == cudaSuccess && fill && bytes)
        *e = cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, cs);
    return d;
}

/* Recording, an operation whose stream joined the capture failed after
 * that: the stream joins the compute stream back all the same, so that the
 * capture can end (the caller launches nothing it recorded after a failure). */
static void rejoin_recording(cudaStream_t stream, cudaEvent_t ev)
{
    if (cudaEventRecord(ev, stream) == cudaSuccess)
        cudaStreamWaitEvent(compute_stream(), ev, 0);
    cudaGetLastError();
}

/* Queues r after its operation (on `stream`), in the pending list (a
 * recorded one stays out of it: nothing runs until the graph is launched).
 * reg_mu held. */
static int finish_issue_locked(nc_state *s, nc_req *r, cudaStream_t stream, int recording)
{
    r->stream = stream;
    cudaError_t e = cudaEventRecord(r->done, stream);
    if (e != cudaSuccess)
        return fail_cuda_locked(s, e, r->label, "cudaEventRecord");
    r->recorded = recording;
    if (recording)
        return COMM_OK;
    nc_req **p = &s->pending;
    while (*p)
        p = &(*p)->next;
    *p = r;
    r->next = NULL;
    return COMM_OK;
}

/* The request to the caller, blocking or not: comm_wait (nccl_wait) completes it. */
static int hand_over(comm *c, nc_req *r, comm_req **req)
{
    r->base.c = c;
    *req = &r->base;
    return COMM_OK;
}

/* Undoes a request that never reached the pending list. */
static int drop(nc_req *r, int rc)
{
    req_free(r);
    return rc;
}

/* The NCCL calls of one collective on device buffers; reg_mu held. Uneven
 * chunks (comm_chunk) become a group of per-chunk reduces / broadcasts. */
static ncclResult_t launch_locked(nc_state *s, const coll_args *a, const void *send, void *recv)
{
    comm *c = s->c;
    ncclDataType_t t = nc_type(a->dt);
    size_t n = a->count, es = comm_dtype_size(a->dt);
    switch (a->kind) {
    case COLL_ALL_REDUCE:
        return dt_nccl.all_reduce(send, recv, n, t, nc_op(a->op), s->nc, s->stream);
    case COLL_BARRIER:
        return dt_nccl.all_reduce(s->one, s->one, 1, ncclFloat32, ncclSum, s->nc, s->stream);
    case COLL_BROADCAST:
        return dt_nccl.broadcast(recv, recv, n, t, a->root, s->nc, s->stream);
    case COLL_ALL_TO_ALL: {
        /* one group: the own piece a device copy on the same stream, the others
         * a send and a receive each (zero counts skipped on both sides alike:
         * a's counts say what the peer sends) */
        ncclResult_t r = dt_nccl.group_start();
        size_t so = 0, ro = 0;
        for (int q = 0; q < c->size && r == ncclSuccess; q++) {
            size_t sc = a->send_counts[q], rcnt = a->recv_counts[q];
            if (q == c->rank) {
                if (sc && cudaMemcpyAsync((char *)recv + ro * es, (const char *)send + so * es, sc * es,
                                          cudaMemcpyDeviceToDevice, s->stream) != cudaSuccess)
                    r = ncclUnhandledCudaError;
            } else {
                if (sc)
                    r = dt_nccl.send((const char *)send + so * es, sc, t, q, s->nc, s->stream);
                if (r == ncclSuccess && rcnt)
                    r = dt_nccl.recv((char *)recv + ro * es, rcnt, t, q, s->nc, s->stream);
            }
            so += sc;
            ro += rcnt;
        }
        ncclResult_t g = dt_nccl.group_end();
        return r != ncclSuccess ? r : g;
    }
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_GATHER:
        break;
    }
    size_t off, len;
    comm_chunk(n, c->size, c->rank, &off, &len);
    int even = n % (size_t)c->size == 0;
    if (a->kind == COLL_REDUCE_SCATTER && even)
        return dt_nccl.reduce_scatter(send, recv, n / (size_t)c->size, t, nc_op(a->op), s->nc,
                                      s->stream);
    if (a->kind == COLL_ALL_GATHER && even)
        return dt_nccl.all_gather(send, recv, n / (size_t)c->size, t, s->nc, s->stream);
    ncclResult_t r = dt_nccl.group_start();
    for (int q = 0; q < c->size && r == ncclSuccess; q++) {
        size_t qo, ql;
        comm_chunk(n, c->size, q, &qo, &ql);
        if (ql == 0)
            continue;  /* the same on every rank: all skip it */
        if (a->kind == COLL_REDUCE_SCATTER)
            r = dt_nccl.reduce((const char *)send + qo * es, recv, ql, t, nc_op(a->op), q, s->nc,
                               s->stream);
        else
            r = dt_nccl.broadcast(q == c->rank ? send : (char *)recv + qo * es,
                                  (char *)recv + qo * es, ql, t, q, s->nc, s->stream);
    }
    ncclResult_t g = dt_nccl.group_end();
    return r != ncclSuccess ? r : g;
}

/* coll_start: enqueued on s->stream after the compute stream's work so far;
 * blocking or not, the request's wait completes it. */
static int nccl_coll_start(comm *c, const coll_args *a, int blocking, comm_req **req)
{
    (void)blocking;
    nc_state *s = c->be_state;
    *req = NULL;
    if (atomic_load(&c->status) != COMM_OK)
        return COMM_EBROKEN;
    int rec = comm_dev_capturing(); /* comm.c let only device buffers through then */
    char label[160];
    comm_coll_label(c, a->kind, label, sizeof label);
    size_t es = comm_dtype_size(a->dt), ns, nr;
    comm_coll_extent(c, a, &ns, &nr);
    if (a->kind == COLL_ALL_TO_ALL ? ns + nr == 0 : a->count == 0 && a->kind != COLL_BARRIER)
        return COMM_OK;
    nc_req *r = req_new(s, label);
    if (!r)
        return comm_fail(c, COMM_ESYS, "%s: cannot create a CUDA event", label);

    /* host buffers go through one device block: [input | result] */
    const void *send = a->send;
    void *recv = a->recv;
    int shost = ns > 0 && comm_dev_is_host(a->send), rhost = nr > 0 && comm_dev_is_host(a->recv);
    cudaError_t e = cudaSuccess;
    if (shost || rhost) {
        size_t sb = shost ? ns * es : 0, rb = rhost ? nr * es : 0;
        r->stage = stage_in(NULL, sb + rb, 0, &e);
        if (e == cudaSuccess && shost && sb)
            e = cudaMemcpyAsync(r->stage, a->send, sb, cudaMemcpyHostToDevice, compute_stream());
        /* a broadcast's buffer is its input too (the root's matters) */
        if (e == cudaSuccess && rhost && a->kind == COLL_BROADCAST)
            e = cudaMemcpyAsync((char *)r->stage + sb, a->recv, rb, cudaMemcpyHostToDevice,
                                compute_stream());
        if (shost)
            send = r->stage;
        if (rhost) {
            recv = (char *)r->stage + sb;
            r->host_dst = a->recv;
            r->stage_src = recv;
            r->stage_bytes = rb;
        }
    }
    if (e == cudaSuccess && a->kind == COLL_BARRIER && !s->one)
        e = cudaMallocAsync((void **)&s->one, sizeof(float), s->stream);
    if (e == cudaSuccess && a->kind == COLL_BARRIER)
        e = cudaMemsetAsync(s->one, 0, sizeof(float), s->stream);

    pthread_mutex_lock(&reg_mu);
    int rc;
    if (e != cudaSuccess)
        rc = fail_cuda_locked(s, e, label, "staging host buffers");
    else if (!s->nc)
        rc = atomic_load(&c->status) != COMM_OK ? atomic_load(&c->status) : COMM_EBROKEN;
    else if ((e = after_compute(s, s->stream, rec)) != cudaSuccess)
        rc = fail_cuda_locked(s, e, label, "ordering after the compute stream");
    else {
        ncclResult_t nr_ = launch_locked(s, a, send, recv);
        rc = nr_ == ncclSuccess || nr_ == ncclInProgress ? COMM_OK
                                                         : fail_nccl_locked(s, s->nc, nr_, label);
        if (rc == COMM_OK && nr_ == ncclInProgress) {
            pthread_mutex_unlock(&reg_mu);
            rc = settle(s, &s->nc, r->deadline, label);
            pthread_mutex_lock(&reg_mu);
        }
        if (rc == COMM_OK)
            rc = finish_issue_locked(s, r, s->stream, rec);
        if (rc != COMM_OK && rec)
            rejoin_recording(s->stream, r->done);
    }
    pthread_mutex_unlock(&reg_mu);
    if (rc != COMM_OK)
        return drop(r, rc);
    return hand_over(c, r, req);
}

/* ---- send / recv ---- */

/* Makes one lane: its sender makes the id, the receiver reads it, both create
 * the two-rank communicator (a rendezvous of the two, bounded by the timeout). */
static int lane_make(nc_state *s, int is_send, int peer, const char *label)
{
    comm *c = s->c;
    nc_lane *l = calloc(1, sizeof *l);
    if (!l)
        return comm_fail(c, COMM_ESYS, "%s: out of memory", label);
    if (cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        free(l);
        return comm_fail(c, COMM_ESYS, "%s: cannot create a CUDA stream", label);
    }
    pthread_mutex_lock(&reg_mu);
    s->lanes[(size_t)is_send * (size_t)c->size + (size_t)peer] = l;  /* abort_all sees it */
    pthread_mutex_unlock(&reg_mu);
    int src = is_send ? c->rank : peer, dst = is_send ? peer : c->rank;
    char key[400];
    snprintf(key, sizeof key, "%s/nccl-p2p/%d-%d", c->id, src, dst);
    ncclUniqueId id;
    int rc = exchange_id(s, is_send, key, &id, label);
    if (rc == COMM_OK)
        rc = init_comm(s, &l->nc, 2, id, is_send ? 0 : 1, label);
    return rc;
}

/* The lane for (is_send, peer). The first send or receive between two ranks
 * makes both of their lanes, the lower rank's sending lane first, so the two
 * always meet in the same order whichever of them sends first (each making
 * only the lane it needs would deadlock two ranks that both send first). */
static int lane_get(nc_state *s, int is_send, int peer, nc_lane **out, const char *label)
{
    comm *c = s->c;
    size_t n = (size_t)c->size;
    if (!s->lanes[n + (size_t)peer] || !s->lanes[(size_t)peer]) {
        int lo_sends = c->rank < peer;  /* this rank's lane that goes first */
        int rc = COMM_OK;
        for (int k = 0; k < 2 && rc == COMM_OK; k++) {
            int send_lane = k == 0 ? lo_sends : !lo_sends;
            if (!s->lanes[(size_t)send_lane * n + (size_t)peer])
                rc = lane_make(s, send_lane, peer, label);
        }
        if (rc != COMM_OK)
            return rc;
    }
    *out = s->lanes[(size_t)is_send * n + (size_t)peer];
    return (*out)->nc ? COMM_OK : COMM_EBROKEN;
}

/* p2p_start: enqueued on the (is_send, peer) lane's stream. */
static int nccl_p2p_start(comm *c, int is_send, void *buf, size_t count, comm_dtype dt, int peer,
                          int blocking, comm_req **req)
{
    (void)blocking;
    nc_state *s = c->be_state;
    *req = NULL;
    if (atomic_load(&c->status) != COMM_OK)
        return COMM_EBROKEN;
    size_t bytes = count * comm_dtype_size(dt);
    char label[160], who[64];
    snprintf(label, sizeof label, "%s of %zu bytes %s %s in %s", is_send ? "send" : "recv", bytes,
             is_send ? "to" : "from", comm_peer_name(c, peer, who), c->name);
    if (count == 0)
        return COMM_OK;  /* nothing moves; both sides skip it alike */
    int rec = comm_dev_capturing();
    size_t n = (size_t)c->size;
    if (rec && (!s->lanes[n + (size_t)peer] || !s->lanes[(size_t)peer]))
        return comm_fail(c, COMM_EINVAL, "%s: the first exchange between two ranks makes their NCCL lanes, which "
                         "cannot be recorded into a CUDA graph; it must run once before the recording", label);
    nc_lane *l = NULL;
    int rc = lane_get(s, is_send, peer, &l, label);
    if (rc != COMM_OK)
        return rc;
    nc_req *r = req_new(s, label);
    if (!r)
        return comm_fail(c, COMM_ESYS, "%s: cannot create a CUDA event", label);
    cudaError_t e = cudaSuccess;
    void *dbuf = buf;
    if (comm_dev_is_host(buf)) {
        r->stage = stage_in(buf, bytes, is_send, &e);
        dbuf = r->stage;
        if (!is_send) {
            r->host_dst = buf;
            r->stage_src = r->stage;
            r->stage_bytes = bytes;
        }
    }
    pthread_mutex_lock(&reg_mu);
    if (e != cudaSuccess)
        rc = fail_cuda_locked(s, e, label, "staging a host buffer");
    else if (!l->nc)
        rc = atomic_load(&c->status) != COMM_OK ? atomic_load(&c->status) : COMM_EBROKEN;
    else if ((e = after_compute(s, l->stream, rec)) != cudaSuccess)
        rc = fail_cuda_locked(s, e, label, "ordering after the compute stream");
    else {
        ncclResult_t g = dt_nccl.group_start();
        ncclResult_t x = g == ncclSuccess
                             ? (is_send ? dt_nccl.send(dbuf, count, nc_type(dt), 1, l->nc, l->stream)
                                        : dt_nccl.recv(dbuf, count, nc_type(dt), 0, l->nc, l->stream))
                             : g;
        g = dt_nccl.group_end();
        if (x == ncclSuccess)
            x = g;
        rc = x == ncclSuccess || x == ncclInProgress ? COMM_OK : fail_nccl_locked(s, l->nc, x, label);
        if (rc == COMM_OK && x == ncclInProgress) {
            pthread_mutex_unlock(&reg_mu);
            rc = settle(s, &l->nc, r->deadline, label);
            pthread_mutex_lock(&reg_mu);
        }
        if (rc == COMM_OK)
            rc = finish_issue_locked(s, r, l->stream, rec);
        if (rc != COMM_OK && rec)
            rejoin_recording(l->stream, r->done);
    }
    pthread_mutex_unlock(&reg_mu);
    if (rc != COMM_OK)
        return drop(r, rc);
    return hand_over(c, r, req);
}

static int nccl_wait(comm_req *q)
{
    return req_wait((nc_req *)q);
}

/* comm_wait_device: an event on the compute stream, pending like a request,
 * so that the watchdog and the wait bound it and see NCCL's errors. */
static int nccl_device_wait(comm *c, const char *what)
{
    nc_state *s = c->be_state;
    char label[160];
    snprintf(label, sizeof label, "%s in %s", what, c->name);
    nc_req *r = req_new(s, label);
    if (!r)
        return comm_fail(c, COMM_ESYS, "%s: cannot create a CUDA event", label);
    pthread_mutex_lock(&reg_mu);
    int rc = atomic_load(&c->status);
    if (rc == COMM_OK && !s->nc)
        rc = COMM_EBROKEN;
    if (rc == COMM_OK)
        rc = finish_issue_locked(s, r, compute_stream(), 0);
    pthread_mutex_unlock(&reg_mu);
    if (rc != COMM_OK)
        return drop(r, rc);
    r->base.c = c;
    return req_wait(r);
}

static void *nccl_stream(const comm *c)
{
    const nc_state *s = c->be_state;
    return s ? (void *)s->stream : NULL;
}

#else /* a build without CUDA: no NCCL; the probe says why, so the world never picks it */

static void nccl_probe(char *busid, size_t len, char *why, size_t whylen)
{
    (void)len;
    busid[0] = '\0';
    snprintf(why, whylen, "this dtrun was built without CUDA and NCCL");
}

static int nccl_create(comm *c)
{
    return comm_fail(c, COMM_EINVAL, "%s: this dtrun was built without CUDA and NCCL", c->name);
}

static void nccl_destroy(comm *c) { (void)c; }

static int nccl_coll_start(comm *c, const coll_args *a, int blocking, comm_req **req)
{
    (void)a, (void)blocking;
    *req = NULL;
    return comm_fail(c, COMM_EINVAL, "%s: no NCCL in this build", c->name);
}

static int nccl_p2p_start(comm *c, int is_send, void *buf, size_t count, comm_dtype dt, int peer,
                          int blocking, comm_req **req)
{
    (void)is_send, (void)buf, (void)count, (void)dt, (void)peer, (void)blocking;
    *req = NULL;
    return comm_fail(c, COMM_EINVAL, "%s: no NCCL in this build", c->name);
}

static int nccl_wait(comm_req *req)
{
    (void)req;
    return COMM_EINVAL;  /* never reached: no start here makes a request */
}

static int nccl_device_wait(comm *c, const char *what)
{
    (void)what;
    return comm_fail(c, COMM_EINVAL, "%s: no NCCL in this build", c->name);
}

static void *nccl_stream(const comm *c)
{
    (void)c;
    return NULL;
}

#endif

/* world_accepts: NCCL when each rank published a GPU (probe) and no two ranks
 * of a node share one (NCCL <= 2.29 refuses that: "Duplicate GPU"). Forced,
 * a refusal is an error naming the rank. */
static int nccl_world_accepts(const comm *c, int forced, const char *my_why, char *err,
                              size_t errlen)
{
    const comm_peer_info *info = c->info;
    for (int r = 0; r < c->size; r++) {
        if (!info[r].gpu[0]) {
            if (forced)
                snprintf(err, errlen, "comm: DTRUN_COMM_BACKEND=nccl but rank %d (%s) cannot use "
                         "NCCL: %s", r, info[r].host,
                         r == c->rank ? my_why : "no CUDA device in use or no libnccl there");
            return forced ? -1 : 0;
        }
        for (int q = 0; q < r; q++)
            if (strcmp(info[q].node, info[r].node) == 0 && strcmp(info[q].gpu, info[r].gpu) == 0) {
                if (forced)
                    snprintf(err, errlen, "comm: DTRUN_COMM_BACKEND=nccl but ranks %d and %d share "
                             "GPU %s on %s, and NCCL refuses two ranks on one GPU; give each rank "
                             "its own GPU, or use DTRUN_COMM_BACKEND=cpu (shm/tcp, device buffers "
                             "staged through host memory)", q, r, info[r].gpu, info[r].host);
                return forced ? -1 : 0;
            }
    }
    return 1;
}

const comm_backend comm_backend_nccl = {
    .name = "nccl",
    .memory = COMM_MEM_DEVICE,
    .probe = nccl_probe,
    .world_accepts = nccl_world_accepts,
    .create = nccl_create,
    .destroy = nccl_destroy,
    .stream = nccl_stream,
    .coll_start = nccl_coll_start,
    .p2p_start = nccl_p2p_start,
    .wait = nccl_wait,
    .device_wait = nccl_device_wait,
};
