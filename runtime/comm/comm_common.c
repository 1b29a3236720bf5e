/* comm_common.c — what every backend needs the same way: the names and labels
 * of collectives, and how much of each buffer a collective touches on a rank.
 * One copy, so that the CPU transports, the NCCL backend and the staging of
 * device buffers never disagree on a message or a size. */
#include <stdatomic.h>
#include <stdio.h>

#include "lib/util/beacon.h"
#include "runtime/comm/comm_internal.h"

const char *comm_coll_name(coll_kind k)
{
    switch (k) {
    case COLL_ALL_REDUCE: return "all_reduce";
    case COLL_REDUCE_SCATTER: return "reduce_scatter";
    case COLL_ALL_GATHER: return "all_gather";
    case COLL_BROADCAST: return "broadcast";
    case COLL_BARRIER: return "barrier";
    case COLL_ALL_TO_ALL: return "all_to_allv";
    }
    return "?";
}

/* Every collective this process entered, on any communicator. */
static _Atomic unsigned long long entered;

void comm_coll_label(comm *c, coll_kind k, char *buf, size_t len)
{
    c->coll_seq++;
    unsigned long long n = atomic_fetch_add(&entered, 1) + 1;
    /* Two numberings, each named: the communicator's own count (the same
     * collective has the same number on all its members) and this rank's
     * count over all its communicators (what a rank that stops answering last
     * entered, next to what its peers wait in: collective #17 against #18). */
    snprintf(buf, len, "%s #%llu of %s (rank %d's collective #%llu)", comm_coll_name(k),
             (unsigned long long)c->coll_seq, c->name, c->world_ranks[c->rank], n);
    /* the last collective entered, for the agent's report if this rank hangs here */
    beacon_note(buf);
}

void comm_coll_extent(const comm *c, const coll_args *a, size_t *nsend, size_t *nrecv)
{
    size_t off, len;
    comm_chunk(a->count, c->size, c->rank, &off, &len);
    switch (a->kind) {
    case COLL_ALL_REDUCE: *nsend = a->count, *nrecv = a->count; break;
    case COLL_REDUCE_SCATTER: *nsend = a->count, *nrecv = len; break;
    case COLL_ALL_GATHER: *nsend = len, *nrecv = a->count; break;
    case COLL_BROADCAST: *nsend = 0, *nrecv = a->count; break;
    case COLL_ALL_TO_ALL:
        *nsend = *nrecv = 0;
        for (int r = 0; r < c->size; r++)
            *nsend += a->send_counts[r], *nrecv += a->recv_counts[r];
        break;
    default: *nsend = 0, *nrecv = 0; break;
    }
}
