/* comm_cpu.c — the backend entries that the CPU transports (self, shm, tcp)
 * share: starting a collective (queued in issue order for the communicator's
 * worker thread, comm_queue.c) or a send / receive (the progress engine,
 * comm_p2p.c), waiting for it, and running one collective on host memory with
 * the bf16 staging (reduced in fp32, rounded once) for a transport that does
 * not move bf16 itself (bf16_native: shm and tcp do). Each transport brings only
 * its synchronous host functions (comm_cpu_ops, set in c->cpu by its create). */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm_internal.h"

void comm_cpu_probe(char *dev, size_t len, char *why, size_t whylen)
{
    (void)len;
    dev[0] = '\0';
    if (whylen)
        why[0] = '\0';
}

int comm_cpu_world_accepts(const comm *world, int forced, const char *my_why, char *err,
                           size_t errlen)
{
    (void)world, (void)forced, (void)my_why, (void)err, (void)errlen;
    return 0;  /* never the world's device backend: groups pick self / shm / tcp */
}

void *comm_cpu_stream(const comm *c)
{
    (void)c;
    return NULL;  /* the worker thread and the progress engine, not a device queue */
}

int comm_cpu_coll_start(comm *c, const coll_args *a, int blocking, comm_req **req)
{
    cpu_req *r = NULL;
    int rc = comm_queue_start(c, a, blocking, &r);
    *req = r ? &r->base : NULL;
    return rc;
}

int comm_cpu_p2p_start(comm *c, int is_send, void *buf, size_t count, comm_dtype dt, int peer,
                       int blocking, comm_req **req)
{
    cpu_req *r = NULL;
    int rc = comm_p2p_start(c, is_send, buf, count * comm_dtype_size(dt), peer, blocking, &r);
    *req = r ? &r->base : NULL;
    return rc;
}

int comm_cpu_wait(comm_req *req)
{
    cpu_req *r = (cpu_req *)req;
    return r->is_p2p ? comm_p2p_wait(r) : comm_queue_wait(r);
}

/* Their collectives have finished on the host when their wait returns (device
 * buffers staged back in it, comm_stage.c): nothing of theirs is left on the
 * device to watch. */
int comm_cpu_device_wait(comm *c, const char *what)
{
    (void)what;
    return atomic_load(&c->status);
}

void comm_cpu_stop(comm *c)
{
    comm_queue_destroy(c);
    comm_p2p_destroy(c);
}

/* ---- one collective on this thread ---- */

static float *stage_floats(comm *c, size_t n)
{
    if (n > c->stage_cap) {
        float *p = realloc(c->stage, n * sizeof(float));
        if (!p)
            return NULL;
        c->stage = p;
        c->stage_cap = n;
    }
    return c->stage;
}

/* all_to_allv on the CPU transports: the own piece copied, every other piece
 * one point-to-point message each way (zero-length ones too, so a count
 * mismatch is an error, never a misplaced message), all posted before any is
 * waited for, moved together by the progress engine (comm_p2p.c). */
static int all_to_allv(comm *c, const coll_args *a)
{
    size_t es = comm_dtype_size(a->dt), soff = 0, roff = 0;
    int n = c->size, me = c->rank, nreq = 0, rc = COMM_OK;
    cpu_req **reqs = n > 1 ? calloc(2 * (size_t)(n - 1), sizeof *reqs) : NULL;
    if (n > 1 && !reqs)
        return comm_fail(c, COMM_ESYS, "%s: out of memory", c->label);
    for (int r = 0; r < n; r++) {
        const char *s = (const char *)a->send + soff * es;
        char *d = (char *)a->recv + roff * es;
        if (r == me) {
            if (a->send_counts[r])
                memcpy(d, s, a->send_counts[r] * es);
        } else if (rc == COMM_OK) {
            rc = comm_p2p_start(c, 0, d, a->recv_counts[r] * es, r, 1, &reqs[nreq]);
            if (rc == COMM_OK)
                nreq++;
            if (rc == COMM_OK)
                rc = comm_p2p_start(c, 1, (void *)s, a->send_counts[r] * es, r, 1, &reqs[nreq]);
            if (rc == COMM_OK)
                nreq++;
        }
        soff += a->send_counts[r];
        roff += a->recv_counts[r];
    }
    /* every posted op is waited for (a failure fails the rest at once) */
    for (int i = 0; i < nreq; i++) {
        int st = comm_p2p_wait(reqs[i]);
        if (rc == COMM_OK)
            rc = st;
    }
    free(reqs);
    return rc;
}

int comm_coll_exec(comm *c, const coll_args *a)
{
    if (atomic_load(&c->status) != COMM_OK)
        return COMM_EBROKEN;
    comm_coll_label(c, a->kind, c->label, sizeof c->label);
    const comm_cpu_ops *t = c->cpu;
    size_t n = a->count, es = comm_dtype_size(a->dt);
    if (a->kind == COLL_ALL_TO_ALL)
        return all_to_allv(c, a);
    if (n == 0 && a->kind != COLL_BARRIER)
        return COMM_OK;
    switch (a->kind) {
    case COLL_ALL_REDUCE:
        if (a->dt == COMM_F32 || t->bf16_native)
            return t->all_reduce(c, a->send, a->recv, n, a->dt, a->op);
        else {
            float *s = stage_floats(c, n);
            if (!s)
                return comm_fail(c, COMM_ESYS, "%s: out of memory staging bf16", c->label);
            comm_bf16_to_f32(s, a->send, n);
            int rc = t->all_reduce(c, s, s, n, COMM_F32, a->op);
            if (rc == COMM_OK)
                comm_f32_to_bf16(a->recv, s, n);
            return rc;
        }
    case COLL_REDUCE_SCATTER:
        if (a->dt == COMM_F32 || t->bf16_native)
            return t->reduce_scatter(c, a->send, a->recv, n, a->dt, a->op);
        else {
            size_t off, len;
            comm_chunk(n, c->size, c->rank, &off, &len);
            float *s = stage_floats(c, n + len);
            if (!s)
                return comm_fail(c, COMM_ESYS, "%s: out of memory staging bf16", c->label);
            comm_bf16_to_f32(s, a->send, n);
            int rc = t->reduce_scatter(c, s, s + n, n, COMM_F32, a->op);
            if (rc == COMM_OK)
                comm_f32_to_bf16(a->recv, s + n, len);
            return rc;
        }
    case COLL_ALL_GATHER:
        return t->all_gather(c, a->send, a->recv, n, es);
    case COLL_BROADCAST:
        return t->broadcast(c, a->recv, n * es, a->root);
    case COLL_BARRIER:
        return t->barrier(c);
    case COLL_ALL_TO_ALL:
        break;  /* above */
    }
    return COMM_EINVAL;
}
