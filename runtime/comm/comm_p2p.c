/* comm_p2p.c — the CPU transports' point-to-point engine: send / recv queues per peer, progressed
 * together so that two ranks exchanging big messages (pipeline stages sending
 * activations one way and gradients the other) never deadlock.
 *
 * Ops queue per (peer, direction) in posting order, which is what matches
 * messages. Whoever waits drives the engine ("leader"): it moves every queue's
 * head as far as the transport allows without blocking, then sleeps in the
 * backend (futex on shm, poll on tcp) until something may move. Other waiters
 * sleep on a condition variable and take over when the leader leaves. A
 * background thread, started by the first asynchronous op, keeps asynchronous
 * ops moving while nobody waits (e.g. an isend followed by a collective on
 * another communicator). Every op has a deadline; the peers of stuck ops are
 * checked for liveness every 100 ms. */
#include <stdlib.h>

#include "runtime/comm/comm_internal.h"

struct comm_p2p {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    p2p_op **head[2], **tail[2];   /* [is_send][peer] */
    p2p_wait *waits;               /* 2 * size, used by the leader only */
    int leader;
    int pending_async;
    int stop;
    int has_thread;
    pthread_t thread;
    double next_check;
};

static comm_p2p *p2p_get(comm *c)
{
    if (c->p2p)
        return c->p2p;
    comm_p2p *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    size_t n = (size_t)c->size;
    for (int d = 0; d < 2; d++) {
        p->head[d] = calloc(n, sizeof(p2p_op *));
        p->tail[d] = calloc(n, sizeof(p2p_op *));
    }
    p->waits = calloc(2 * n, sizeof(p2p_wait));
    if (!p->head[0] || !p->head[1] || !p->tail[0] || !p->tail[1] || !p->waits) {
        for (int d = 0; d < 2; d++) {
            free(p->head[d]);
            free(p->tail[d]);
        }
        free(p->waits);
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    c->p2p = p;
    return p;
}

static void finish(comm_p2p *p, p2p_op *op, int status)
{
    op->status = status;
    op->finished = 1;
    if (op->async)
        p->pending_async--;
    pthread_cond_broadcast(&p->cv);
}

/* The communicator broke: every queued op ends with its error. */
static void fail_all(comm *c, comm_p2p *p, int status)
{
    for (int d = 0; d < 2; d++)
        for (int peer = 0; peer < c->size; peer++) {
            while (p->head[d][peer]) {
                p2p_op *op = p->head[d][peer];
                p->head[d][peer] = op->next;
                finish(p, op, status);
            }
            p->tail[d][peer] = NULL;
        }
}

static void pop(comm_p2p *p, int d, int peer)
{
    p2p_op *op = p->head[d][peer];
    p->head[d][peer] = op->next;
    if (!op->next)
        p->tail[d][peer] = NULL;
}

/* Moves every queue's head as far as it goes; returns how many heads wait. With
 * the lock held. */
static int progress_all(comm *c, comm_p2p *p)
{
    int nw = 0;
    if (atomic_load(&c->status) != COMM_OK) {
        fail_all(c, p, COMM_EBROKEN);
        return 0;
    }
    double now = clock_now_s();
    for (int peer = 0; peer < c->size; peer++)
        for (int d = 0; d < 2; d++) {
            p2p_op *op;
            while ((op = p->head[d][peer])) {
                int rc = c->cpu->p2p_progress(c, op);
                if (rc == 1) {
                    pop(p, d, peer);
                    finish(p, op, COMM_OK);
                    continue;
                }
                if (rc == 0 && now > op->deadline) {
                    char who[64];
                    rc = comm_fail(c, COMM_ETIMEOUT,
                                   "%s of %zu bytes %s %s in %s: timed out after %.1f s "
                                   "waiting for %s",
                                   op->is_send ? "send" : "recv", op->bytes,
                                   op->is_send ? "to" : "from", comm_peer_name(c, peer, who),
                                   c->name, c->timeout, who);
                }
                if (rc < 0) {
                    fail_all(c, p, rc);
                    return 0;
                }
                p->waits[nw++] = (p2p_wait){peer, d};
                break;
            }
        }
    if (nw > 0 && now >= p->next_check) {
        p->next_check = now + 0.1;
        for (int i = 0; i < nw; i++) {
            int rc = c->cpu->p2p_check_peer(c, p->waits[i].peer);
            if (rc != COMM_OK) {
                fail_all(c, p, rc);
                return 0;
            }
        }
    }
    return nw;
}

/* Drives the engine until `mine` finished, or (mine == NULL: the background
 * thread) until no asynchronous op is pending or the engine stops. */
static void drive(comm *c, comm_p2p *p, p2p_op *mine)
{
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (mine ? mine->finished : (p->stop || p->pending_async == 0))
            break;
        if (p->leader) {
            pthread_cond_wait(&p->cv, &p->mu);
            continue;
        }
        p->leader = 1;
        unsigned token = c->cpu->p2p_token(c);
        int nw = progress_all(c, p);
        if (nw == 0 || (mine ? mine->finished : (p->stop || p->pending_async == 0))) {
            p->leader = 0;
            pthread_cond_broadcast(&p->cv);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        c->cpu->p2p_sleep(c, token, p->waits, nw, clock_now_s() + 0.05);
        pthread_mutex_lock(&p->mu);
        p->leader = 0;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

static void *p2p_thread(void *arg)
{
    comm_background_thread = 1;
    comm *c = arg;
    comm_p2p *p = c->p2p;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        if (p->pending_async == 0) {
            pthread_cond_wait(&p->cv, &p->mu);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        drive(c, p, NULL);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Queues op (lock held); COMM_OK or the communicator's error. */
static int post(comm *c, comm_p2p *p, p2p_op *op)
{
    if (atomic_load(&c->status) != COMM_OK)
        return COMM_EBROKEN;
    int d = op->is_send;
    op->next = NULL;
    op->deadline = clock_now_s() + c->timeout;
    if (p->tail[d][op->peer])
        p->tail[d][op->peer]->next = op;
    else
        p->head[d][op->peer] = op;
    p->tail[d][op->peer] = op;
    if (op->async)
        p->pending_async++;
    return COMM_OK;
}

int comm_p2p_start(comm *c, int is_send, void *buf, size_t bytes, int peer, int blocking,
                   cpu_req **req)
{
    comm_p2p *p = p2p_get(c);
    cpu_req *r = calloc(1, sizeof *r);
    if (!p || !r) {
        free(r);
        return comm_fail(c, COMM_ESYS, "%s: out of memory", c->name);
    }
    r->base.c = c;
    r->is_p2p = 1;
    r->op = (p2p_op){.is_send = is_send, .peer = peer, .buf = buf, .bytes = bytes,
                     .async = !blocking};
    pthread_mutex_lock(&p->mu);
    int rc = post(c, p, &r->op);
    if (blocking) {
        /* its wait comes next and drives the engine: no thread needed */
        int kick = p->leader;
        pthread_mutex_unlock(&p->mu);
        if (rc != COMM_OK) {
            free(r);
            return rc;
        }
        if (kick)
            c->cpu->p2p_kick(c);
        *req = r;
        return COMM_OK;
    }
    if (rc == COMM_OK && !p->has_thread) {
        if (pthread_create(&p->thread, NULL, p2p_thread, c) == 0)
            p->has_thread = 1;
        else
            rc = comm_fail(c, COMM_ESYS, "%s: cannot start the send/recv thread", c->name);
    }
    int kick = 0;
    if (rc == COMM_OK) {
        if (!p->leader) {
            /* Small messages finish right here, without a thread hop. */
            p->leader = 1;
            progress_all(c, p);
            p->leader = 0;
        } else {
            kick = 1;
        }
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (rc != COMM_OK) {
        if (!r->op.finished && rc != COMM_EBROKEN) {
            /* posted but the thread failed: the comm is broken, drain it */
            pthread_mutex_lock(&p->mu);
            fail_all(c, p, rc);
            pthread_mutex_unlock(&p->mu);
        }
        free(r);
        return rc;
    }
    if (kick)
        c->cpu->p2p_kick(c);
    *req = r;
    return COMM_OK;
}

int comm_p2p_wait(cpu_req *r)
{
    comm *c = r->base.c;
    drive(c, c->p2p, &r->op);
    int st = r->op.status;
    free(r);
    return st;
}

void comm_p2p_destroy(comm *c)
{
    comm_p2p *p = c->p2p;
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    int leader = p->leader;
    pthread_mutex_unlock(&p->mu);
    if (leader)
        c->cpu->p2p_kick(c);
    if (p->has_thread)
        pthread_join(p->thread, NULL);
    for (int d = 0; d < 2; d++) {
        free(p->head[d]);
        free(p->tail[d]);
    }
    free(p->waits);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    c->p2p = NULL;
}
