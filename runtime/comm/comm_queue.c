/* comm_queue.c — the CPU transports' collectives in issue order, on the
 * caller's thread or on the communicator's worker thread.
 *
 * A blocking collective (comm.c starts it and waits at once) runs right away,
 * inside its start, on the caller's thread when nothing is queued (no thread
 * hop on the hot path); otherwise it queues behind the
 * asynchronous ones, because every rank must see one and the same order. The
 * worker thread starts with the first asynchronous collective. Each collective
 * is bounded by the communicator's timeout, so every wait here is bounded too. */
#include <stdlib.h>

#include "runtime/comm/comm_internal.h"

struct comm_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cpu_req *head, *tail;
    int running;                 /* a collective is executing */
    int stop;
    int has_thread;
    pthread_t thread;
};

static comm_queue *queue_get(comm *c)
{
    /* Created on first use by the thread that drives the communicator. */
    if (!c->queue) {
        comm_queue *q = calloc(1, sizeof *q);
        if (!q)
            return NULL;
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->cv, NULL);
        c->queue = q;
    }
    return c->queue;
}

_Thread_local int comm_background_thread;

static void *queue_worker(void *arg)
{
    comm_background_thread = 1;
    comm *c = arg;
    comm_queue *q = c->queue;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->running || (!q->head && !q->stop))
            pthread_cond_wait(&q->cv, &q->mu);
        if (!q->head)
            break;                            /* stop, and nothing left to run */
        cpu_req *r = q->head;
        q->head = r->next;
        if (!q->head)
            q->tail = NULL;
        q->running = 1;
        pthread_mutex_unlock(&q->mu);
        int st = comm_coll_exec(c, &r->args);
        pthread_mutex_lock(&q->mu);
        r->status = st;
        r->done = 1;
        q->running = 0;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* With q->mu held. */
static int enqueue(comm *c, comm_queue *q, cpu_req *r)
{
    if (!q->has_thread) {
        if (pthread_create(&q->thread, NULL, queue_worker, c) != 0)
            return comm_fail(c, COMM_ESYS, "%s: cannot start the communicator's thread",
                             c->name);
        q->has_thread = 1;
    }
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    pthread_cond_broadcast(&q->cv);
    return COMM_OK;
}

int comm_queue_start(comm *c, const coll_args *a, int blocking, cpu_req **req)
{
    comm_queue *q = queue_get(c);
    cpu_req *r = calloc(1, sizeof *r);
    if (!q || !r) {
        free(r);
        return comm_fail(c, COMM_ESYS, "%s: out of memory", c->name);
    }
    r->base.c = c;
    r->args = *a;
    pthread_mutex_lock(&q->mu);
    if (blocking && !q->head && !q->running) {
        q->running = 1;
        pthread_mutex_unlock(&q->mu);
        int st = comm_coll_exec(c, a);
        pthread_mutex_lock(&q->mu);
        q->running = 0;
        r->status = st;
        r->done = 1;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        *req = r;
        return COMM_OK;
    }
    int st = enqueue(c, q, r);
    pthread_mutex_unlock(&q->mu);
    if (st != COMM_OK) {
        free(r);
        return st;
    }
    *req = r;
    return COMM_OK;
}

int comm_queue_wait(cpu_req *r)
{
    comm_queue *q = r->base.c->queue;
    pthread_mutex_lock(&q->mu);
    while (!r->done)
        pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
    int st = r->status;
    free(r);
    return st;
}

void comm_queue_destroy(comm *c)
{
    comm_queue *q = c->queue;
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (q->has_thread)
        pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
    c->queue = NULL;
}
