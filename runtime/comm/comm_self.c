/* comm_self.c — the backend of a group of one: every collective is a copy (or an
 * identity), no store, no peers. Keeps the strategies free of `if (size == 1)`. */
#include <string.h>

#include "runtime/comm/comm_internal.h"

static int self_all_reduce(comm *c, const void *send, void *recv, size_t n, comm_dtype dt,
                           comm_op op)
{
    if (send != recv)
        memmove(recv, send, n * sizeof(float));
    return COMM_OK;
}

static int self_reduce_scatter(comm *c, const void *send, void *recv, size_t n, comm_dtype dt,
                               comm_op op)
{
    if (send != recv)
        memmove(recv, send, n * sizeof(float));
    return COMM_OK;
}

static int self_all_gather(comm *c, const void *send, void *recv, size_t n, size_t esize)
{
    if (send != recv)
        memmove(recv, send, n * esize);
    return COMM_OK;
}

static int self_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    return COMM_OK;
}

static int self_barrier(comm *c)
{
    return COMM_OK;
}

static int self_p2p_progress(comm *c, p2p_op *op)
{
    return comm_fail(c, COMM_EINVAL, "send/recv in a group of one");
}

static unsigned self_p2p_token(comm *c)
{
    return 0;
}

static void self_p2p_sleep(comm *c, unsigned token, const p2p_wait *w, int nw, double until)
{
}

static void self_p2p_kick(comm *c)
{
}

static int self_p2p_check_peer(comm *c, int peer)
{
    return COMM_OK;
}

static const comm_cpu_ops self_ops = {
    .all_reduce = self_all_reduce,
    .reduce_scatter = self_reduce_scatter,
    .all_gather = self_all_gather,
    .broadcast = self_broadcast,
    .barrier = self_barrier,
    .p2p_progress = self_p2p_progress,
    .p2p_token = self_p2p_token,
    .p2p_sleep = self_p2p_sleep,
    .p2p_kick = self_p2p_kick,
    .p2p_check_peer = self_p2p_check_peer,
};

static int self_create(comm *c)
{
    c->cpu = &self_ops;
    return COMM_OK;
}

static void self_destroy(comm *c)
{
    comm_cpu_stop(c);
}

const comm_backend comm_backend_self = {
    .name = "self",
    .memory = COMM_MEM_HOST,
    .probe = comm_cpu_probe,
    .world_accepts = comm_cpu_world_accepts,
    .create = self_create,
    .destroy = self_destroy,
    .stream = comm_cpu_stream,
    .coll_start = comm_cpu_coll_start,
    .p2p_start = comm_cpu_p2p_start,
    .wait = comm_cpu_wait,
    .device_wait = comm_cpu_device_wait,
};
