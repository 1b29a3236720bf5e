/* comm_cpu.c — the backend entries that the CPU transports (self, shm, tcp)
 * share: starting a collective (queued in issue order for the communicator's
 * worker thread, comm_queue.c) or a send / receive (the progress engine,
 * comm_p2p.c), waiting for it, and running one collective on host memory with
 * the bf16 staging (reduced in fp32, rounded once) for a transport that does
 * not move bf16 itself (bf16_native: shm and tcp do). Each transport brings only
 * its synchronous host functions (comm_cpu_ops, set in c->cpu by its create). */
#include <stdlib.h>

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

int comm_coll_exec(comm *c, const coll_args *a)
{
    if (atomic_load(&c->status) != COMM_OK)
        return COMM_EBROKEN;
    comm_coll_label(c, a->kind, c->label, sizeof c->label);
    const comm_cpu_ops *t = c->cpu;
    size_t n = a->count, es = comm_dtype_size(a->dt);
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
    }
    return COMM_EINVAL;
}
