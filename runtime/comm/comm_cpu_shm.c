/* comm_cpu_shm.c — the shared-memory backend: all members on one node.
 *
 * One POSIX shm segment per communicator, created by rank 0, named through the
 * store, mapped by everyone and unlinked as soon as everyone has mapped it (so a
 * crash never leaves it behind). Layout:
 *
 *   header | ctl[n] | mailbox ctl[n*n] | entries[n][depth][entry] | mailboxes[n*n]
 *
 * - ctl[r]: rank r's progress counters (written by r only), its pid (liveness),
 *   and its doorbell: a futex word that anyone who published something rank r
 *   may wait for bumps.
 * - entries: each rank's staging ring of `depth` entries. Collectives are cut
 *   into chunks numbered by a sequence shared by all ranks (it runs on across
 *   calls); chunk g lives in entry g % depth.
 * - mailboxes: one single-producer single-consumer byte ring per ordered pair,
 *   for send / recv.
 *
 * A chunk goes through up to three stages on each rank, each published with a
 * counter so the peers never wait for a whole-group barrier:
 *   produce  write this rank's input into its own entry     -> copied[r]
 *   reduce   fold piece r of every entry (own input in place of own entry) into
 *            own entry and the output                      -> reduced[r]
 *   consume  read what the peers published                 -> consumed[r]
 * A rank may produce chunk g once every peer consumed chunk g - depth (the
 * entry's previous tenant). So a rank runs up to `depth` chunks ahead of its
 * slowest peer, and a peer that is descheduled for a moment (2 ranks on a busy
 * 2-core box, OS jitter) stalls no one until the ring is full.
 *
 * Collectives (p ranks):
 *   all_reduce, small (<= 64 KiB): produce the whole input; consume = reduce
 *     everything from every entry (p-fold reads: cheap while small).
 *   all_reduce, large: each chunk is cut in p pieces; produce copies the pieces
 *     others own, reduce folds piece r, consume copies the other reduced pieces
 *     out. The ranks split the reduction work, so 2 ranks on 2 cores use both.
 *   reduce_scatter: produce the pieces others own; consume folds own piece.
 *   all_gather: produce own piece; consume copies the others'.
 *   broadcast: the root produces; the others consume.  barrier: an empty chunk.
 * Every element is summed in rank order 0..p-1 in both all_reduce forms, so the
 * result does not depend on the count or on who reduced it. bf16 travels as
 * bf16 (an entry holds twice the elements: half the bytes of fp32) and is
 * summed in fp32, rounded once where a rank reduces its piece.
 *
 * Waiting: spin briefly when the ranks have a core each, then yield, then sleep
 * on the doorbell futex with a short timeout to watch the deadline and the pid of
 * the rank waited for. The first rank that sees a dead or silent peer records it
 * in the header (abort word) and rings everyone, so every survivor fails at once
 * with a line naming that rank. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lib/util/shm_name.h"
#include "runtime/env.h"
#include "runtime/comm/comm_internal.h"

#define SHM_MAGIC 0x647472756e73686dULL  /* "dtrunshm" */
#define SMALL_ALL_REDUCE (64 * 1024)     /* bytes: one-stage algorithm up to here */
#define CACHE 128

enum { ABORT_DIED = 1, ABORT_TIMEOUT = 2 };

typedef struct {
    uint64_t magic;
    uint32_t nranks;
    uint32_t depth;
    uint64_t entry_bytes, mbox_bytes, total_bytes;
    /* 0 = fine; else kind << 56 | (by + 1) << 28 | (rank + 1): who failed, how,
     * and who noticed, in one word so that readers never see half of it. */
    _Atomic uint64_t abort_word;
    char pad[CACHE - 48];
} shm_header;

typedef struct {
    /* Written by the owner only: chunks (global sequence) it has … */
    _Atomic uint64_t copied;     /* … produced into its entry */
    _Atomic uint64_t reduced;    /* … reduced (its piece, in its entry) */
    _Atomic uint64_t consumed;   /* … finished reading from every peer's entry */
    int32_t pid;
    char pad0[CACHE / 2 - 28];
    /* Written by the others: a separate half so their bumps do not bounce the
     * owner's counters. */
    _Atomic uint32_t bell;       /* futex word */
    _Atomic uint32_t sleepers;   /* threads of the owner asleep on bell */
    char pad1[CACHE / 2 - 8];
} shm_ctl;

typedef struct {
    _Atomic uint64_t head;       /* bytes the sender wrote */
    char pad0[CACHE / 2 - 8];
    _Atomic uint64_t tail;       /* bytes the receiver consumed */
    char pad1[CACHE / 2 - 8];
} shm_mbox;

typedef struct {
    char *base;
    size_t len;
    shm_header *hdr;
    shm_ctl *ctl;
    shm_mbox *mctl;
    char *entries;
    char *mbox;
    int n, me;
    size_t entry;                /* bytes per entry */
    size_t depth;                /* entries per rank */
    size_t mbox_bytes;
    uint64_t seq;                /* chunks of all earlier collectives (same on every rank) */
    double spin_s;               /* busy-wait this long before sleeping */
    const float **srcs;          /* n, for the reductions (fp32 … */
    const uint16_t **srcs16;     /* … and bf16) */
} shm_state;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, double seconds)
{
    if (seconds <= 0)
        return;
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Tells rank q that something it may wait for changed. The bump comes before
 * the sleeper check, and a sleeper registers before it sleeps on the old value,
 * so no wakeup is lost. */
static void ring(shm_state *s, int q)
{
    atomic_fetch_add(&s->ctl[q].bell, 1);
    if (atomic_load(&s->ctl[q].sleepers))
        futex_wake(&s->ctl[q].bell);
}

static void ring_all(shm_state *s)
{
    for (int q = 0; q < s->n; q++)
        if (q != s->me)
            ring(s, q);
}

static void publish(shm_state *s, _Atomic uint64_t *counter, uint64_t value)
{
    atomic_store_explicit(counter, value, memory_order_release);
    ring_all(s);
}

static void sleep_on_bell(shm_state *s, uint32_t token, double seconds)
{
    shm_ctl *me = &s->ctl[s->me];
    atomic_fetch_add(&me->sleepers, 1);
    futex_wait(&me->bell, token, seconds);
    atomic_fetch_sub(&me->sleepers, 1);
}

/* ---- failures ---- */

/* Turns the header's abort word into this rank's error; `what` names the
 * operation that noticed ("all_reduce #3 of world (rank 0's collective #5)", "recv in group[0,1]"). */
static int shm_aborted(comm *c, shm_state *s, const char *what)
{
    uint64_t w = atomic_load(&s->hdr->abort_word);
    int kind = (int)(w >> 56), by = (int)((w >> 28) & 0xfffffff) - 1;
    int who = (int)(w & 0xfffffff) - 1;
    char a[64], b[64];
    comm_peer_name(c, who, a);
    comm_peer_name(c, by, b);
    const char *op = what;
    if (kind == ABORT_DIED)
        return comm_fail(c, COMM_EPEER, "%s: %s died (pid %d)%s%s", op, a,
                         who >= 0 && who < s->n ? s->ctl[who].pid : -1,
                         by == s->me ? "" : ", seen by ", by == s->me ? "" : b);
    return comm_fail(c, COMM_ETIMEOUT, "%s: timed out after %.1f s waiting for %s%s%s", op,
                     c->timeout, a, by == s->me ? "" : ", seen by ", by == s->me ? "" : b);
}

/* Records that `who` failed (first report wins), wakes every rank. */
static int shm_abort(comm *c, shm_state *s, const char *what, int who, int kind)
{
    uint64_t expected = 0;
    uint64_t w = ((uint64_t)kind << 56) | ((uint64_t)(s->me + 1) << 28) | (uint64_t)(who + 1);
    atomic_compare_exchange_strong(&s->hdr->abort_word, &expected, w);
    ring_all(s);
    return shm_aborted(c, s, what);
}

/* ---- waiting ---- */

typedef int (*ready_fn)(shm_state *s, const void *arg, int *who);

/* How long this thread polls before sleeping: the configured time on the
 * caller's thread, at most BACKGROUND_SPIN_S on the comm layer's own threads,
 * which would otherwise take the core from the compute they overlap. */
#define BACKGROUND_SPIN_S 50e-6

static double shm_spin(const shm_state *s)
{
    return comm_background_thread && s->spin_s > BACKGROUND_SPIN_S ? BACKGROUND_SPIN_S : s->spin_s;
}

/* Waits until ready() holds; `who` (set by ready) is the rank waited for. */
static int shm_wait(comm *c, shm_state *s, ready_fn ready, const void *arg, double deadline)
{
    int who = 0, yields = 0;
    double spin_until = -1, next_check = 0;
    for (unsigned i = 0;; i++) {
        uint32_t token = atomic_load(&s->ctl[s->me].bell);
        if (ready(s, arg, &who))
            return COMM_OK;
        if (atomic_load_explicit(&s->hdr->abort_word, memory_order_relaxed))
            return shm_aborted(c, s, c->label);
        if ((i & 63) != 0 && spin_until != 0) {
            cpu_relax();       /* read the clock only every 64 turns */
            continue;
        }
        double now = clock_now_s();
        if (spin_until < 0)
            spin_until = now + shm_spin(s);
        if (now < spin_until) {
            cpu_relax();
            continue;
        }
        spin_until = 0;
        if (now >= deadline)
            return shm_abort(c, s, c->label, who, ABORT_TIMEOUT);
        if (now >= next_check) {
            next_check = now + 0.1;
            /* A peer may publish its part and exit between the ready() check
             * above and this one (its last collective of the run): look again
             * before calling it dead. */
            if (!comm_pid_alive(s->ctl[who].pid) && !ready(s, arg, &who))
                return shm_abort(c, s, c->label, who, ABORT_DIED);
        }
        if (yields < 4) {      /* let a peer that shares this core run first */
            yields++;
            sched_yield();
            continue;
        }
        double left = deadline - now;
        sleep_on_bell(s, token, left < 0.1 ? left : 0.1);
    }
}

/* ---- the chunk pipeline ---- */

typedef struct {
    coll_kind kind;
    const char *send;
    char *recv;
    size_t n;                    /* elements */
    size_t es;                   /* bytes per element */
    comm_dtype dt;               /* of a reduction: fp32 or bf16 (es 4 or 2) */
    comm_op op;
    int root;
    int direct;                  /* small all_reduce: one stage */
    size_t chunks;
    size_t step;                 /* elements per chunk (all_reduce) or per piece (rs / ag) */
    uint64_t base;               /* sequence number of chunk 0 */
    /* cursors: chunks produced, reduced, consumed by this rank */
    size_t ci, ri, gi;
} shm_job;

static char *entry(shm_state *s, int rank, uint64_t g)
{
    return s->entries + ((size_t)rank * s->depth + (size_t)(g % s->depth)) * s->entry;
}

static size_t min_sz(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* Elements of a segment of `len` that fall in [j, j + step). */
static size_t part(size_t len, size_t j, size_t step)
{
    return len > j ? min_sz(len - j, step) : 0;
}

static int has_reduce(const shm_job *j)
{
    return j->kind == COLL_ALL_REDUCE && !j->direct;
}

/* Large all_reduce: chunk k's length and its piece size (a multiple of 16 floats). */
static void ar_chunk(const shm_job *j, int p, size_t k, size_t *off, size_t *len, size_t *ps)
{
    *off = k * j->step;
    *len = min_sz(j->step, j->n - *off);
    *ps = (((*len + (size_t)p - 1) / (size_t)p) + 15) & ~(size_t)15;
}

/* Rank `who` has not yet reached `target` on counter field `which`. */
static int all_reached(shm_state *s, size_t field, uint64_t target, int *who)
{
    for (int q = 0; q < s->n; q++) {
        if (q == s->me)
            continue;
        _Atomic uint64_t *ctr = (_Atomic uint64_t *)((char *)&s->ctl[q] + field);
        if (atomic_load_explicit(ctr, memory_order_acquire) < target) {
            *who = q;
            return 0;
        }
    }
    return 1;
}

#define F_COPIED offsetof(shm_ctl, copied)
#define F_REDUCED offsetof(shm_ctl, reduced)
#define F_CONSUMED offsetof(shm_ctl, consumed)

static int can_produce(shm_state *s, const shm_job *j, int *who)
{
    uint64_t g = j->base + j->ci;
    if (j->ci >= j->chunks)
        return 0;
    if (g + 1 <= s->depth)
        return 1;
    return all_reached(s, F_CONSUMED, g + 1 - s->depth, who);
}

static int can_reduce(shm_state *s, const shm_job *j, int *who)
{
    if (!has_reduce(j) || j->ri >= j->ci)
        return 0;
    return all_reached(s, F_COPIED, j->base + j->ri + 1, who);
}

static int can_consume(shm_state *s, const shm_job *j, int *who)
{
    if (j->gi >= (has_reduce(j) ? j->ri : j->ci))
        return 0;
    uint64_t target = j->base + j->gi + 1;
    if (has_reduce(j))
        return all_reached(s, F_REDUCED, target, who);
    if (j->kind == COLL_BROADCAST) {
        if (s->me == j->root)
            return 1;
        uint64_t v = atomic_load_explicit(&s->ctl[j->root].copied, memory_order_acquire);
        if (v < target)
            *who = j->root;
        return v >= target;
    }
    return all_reached(s, F_COPIED, target, who);
}

/* Ready when some stage can move; `who` ends as the peer that blocks the
 * earliest stage (the one the timeout message names). */
static int job_ready(shm_state *s, const void *arg, int *who)
{
    const shm_job *j = arg;
    int w = -1, w2 = -1, w3 = -1;
    if (can_produce(s, j, &w3) || can_reduce(s, j, &w2) || can_consume(s, j, &w))
        return 1;
    *who = w >= 0 ? w : w2 >= 0 ? w2 : w3 >= 0 ? w3 : (s->me + 1) % s->n;
    return 0;
}

/* Writes into this rank's own entry, for the peers to read: counted as sent. */
static void put(comm *c, void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)bytes, memory_order_relaxed);
}

/* dst (and dst2) = the rank-order reduction of the sources in s->srcs (fp32)
 * or s->srcs16 (bf16: summed in fp32, rounded once), n elements. */
static void fold(shm_state *s, const shm_job *j, void *dst, void *dst2, size_t n)
{
    if (j->dt == COMM_BF16)
        comm_reduce_bf16(dst, dst2, s->srcs16, s->n, n, j->op, s->n);
    else
        comm_reduce_f32(dst, dst2, s->srcs, s->n, n, j->op, s->n);
}

/* Source q of a reduction: element `at` of buffer b (either dtype). */
static void set_src(shm_state *s, const shm_job *j, int q, const char *b, size_t at)
{
    if (j->dt == COMM_BF16)
        s->srcs16[q] = (const uint16_t *)b + at;
    else
        s->srcs[q] = (const float *)b + at;
}

static void produce(comm *c, shm_state *s, const shm_job *j, size_t k)
{
    int p = s->n, me = s->me;
    size_t es = j->es;
    char *mine = entry(s, me, j->base + k);
    switch (j->kind) {
    case COLL_ALL_REDUCE:
        if (j->direct) {
            put(c, mine, j->send, j->n * es);
        } else {
            size_t off, len, ps;
            ar_chunk(j, p, k, &off, &len, &ps);
            for (int q = 0; q < p; q++) {
                size_t qo = (size_t)q * ps, ql = part(len, qo, ps);
                if (q != me && ql)
                    put(c, mine + qo * es, j->send + (off + qo) * es, ql * es);
            }
        }
        break;
    case COLL_REDUCE_SCATTER:
        for (int q = 0; q < p; q++) {
            size_t qo, ql;
            comm_chunk(j->n, p, q, &qo, &ql);
            size_t len = part(ql, k * j->step, j->step);
            if (q != me && len)
                put(c, mine + (size_t)q * j->step * es, j->send + (qo + k * j->step) * es, len * es);
        }
        break;
    case COLL_ALL_GATHER: {
        size_t ro, rl;
        comm_chunk(j->n, p, me, &ro, &rl);
        size_t len = part(rl, k * j->step, j->step);
        if (len)
            put(c, mine + (size_t)me * j->step * es, j->send + k * j->step * es, len * es);
        break;
    }
    case COLL_BROADCAST:
        if (me == j->root)
            put(c, mine, j->recv + k * s->entry, min_sz(s->entry, j->n - k * s->entry));
        break;
    case COLL_ALL_TO_ALL: /* not a staged job: send / recv (comm_cpu.c) */
    case COLL_BARRIER:
        break;
    }
}

/* Large all_reduce only: fold piece me of chunk k into the own entry (for
 * the peers: counted as sent) and the output. */
static void reduce(comm *c, shm_state *s, const shm_job *j, size_t k)
{
    int p = s->n, me = s->me;
    size_t off, len, ps, es = j->es;
    ar_chunk(j, p, k, &off, &len, &ps);
    size_t mo = (size_t)me * ps, ml = part(len, mo, ps);
    if (!ml)
        return;
    for (int q = 0; q < p; q++) {
        if (q == me)
            set_src(s, j, q, j->send, off + mo);
        else
            set_src(s, j, q, entry(s, q, j->base + k), mo);
    }
    fold(s, j, entry(s, me, j->base + k) + mo * es, j->recv + (off + mo) * es, ml);
    atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)(ml * es), memory_order_relaxed);
}

static void consume(shm_state *s, const shm_job *j, size_t k)
{
    int p = s->n, me = s->me;
    uint64_t g = j->base + k;
    switch (j->kind) {
    case COLL_ALL_REDUCE:
        if (j->direct) {
            for (int q = 0; q < p; q++)
                set_src(s, j, q, q == me ? j->send : entry(s, q, g), 0);
            fold(s, j, j->recv, NULL, j->n);
        } else {
            size_t off, len, ps, es = j->es;
            ar_chunk(j, p, k, &off, &len, &ps);
            for (int q = 0; q < p; q++) {
                size_t qo = (size_t)q * ps, ql = part(len, qo, ps);
                if (q != me && ql)
                    memcpy(j->recv + (off + qo) * es, entry(s, q, g) + qo * es, ql * es);
            }
        }
        break;
    case COLL_REDUCE_SCATTER: {
        size_t ro, rl;
        comm_chunk(j->n, p, me, &ro, &rl);
        size_t len = part(rl, k * j->step, j->step);
        if (!len)
            break;
        for (int q = 0; q < p; q++) {
            if (q == me)
                set_src(s, j, q, j->send, ro + k * j->step);
            else
                set_src(s, j, q, entry(s, q, g), (size_t)me * j->step);
        }
        fold(s, j, j->recv + k * j->step * j->es, NULL, len);
        break;
    }
    case COLL_ALL_GATHER:
        for (int q = 0; q < p; q++) {
            size_t qo, ql;
            comm_chunk(j->n, p, q, &qo, &ql);
            size_t len = part(ql, k * j->step, j->step);
            if (q != me && len)
                memcpy(j->recv + (qo + k * j->step) * j->es,
                       entry(s, q, g) + (size_t)q * j->step * j->es, len * j->es);
        }
        break;
    case COLL_BROADCAST:
        if (me != j->root)
            memcpy(j->recv + k * s->entry, entry(s, j->root, g),
                   min_sz(s->entry, j->n - k * s->entry));
        break;
    case COLL_ALL_TO_ALL: /* not a staged job: send / recv (comm_cpu.c) */
    case COLL_BARRIER:
        break;
    }
}

/* Runs the job's chunks through the stages, whichever can move, until this rank
 * consumed them all. Consuming first frees entries for the peers soonest. */
static int run_job(comm *c, shm_state *s, shm_job *j)
{
    double deadline = clock_now_s() + c->timeout;
    if (atomic_load_explicit(&s->hdr->abort_word, memory_order_relaxed))
        return shm_aborted(c, s, c->label);
    shm_ctl *me = &s->ctl[s->me];
    int who;
    while (j->gi < j->chunks) {
        int moved = 0;
        if (can_consume(s, j, &who)) {
            consume(s, j, j->gi);
            publish(s, &me->consumed, j->base + ++j->gi);
            moved = 1;
        }
        if (can_reduce(s, j, &who)) {
            reduce(c, s, j, j->ri);
            publish(s, &me->reduced, j->base + ++j->ri);
            moved = 1;
        }
        if (can_produce(s, j, &who)) {
            produce(c, s, j, j->ci);
            publish(s, &me->copied, j->base + ++j->ci);
            moved = 1;
        }
        if (!moved) {
            int rc = shm_wait(c, s, job_ready, j, deadline);
            if (rc != COMM_OK)
                return rc;
        }
    }
    s->seq = j->base + j->chunks;
    return COMM_OK;
}

static shm_job job_new(shm_state *s, coll_kind kind, const void *send, void *recv, size_t n,
                       size_t es, comm_op op)
{
    return (shm_job){.kind = kind, .send = send, .recv = recv, .n = n, .es = es, .op = op,
                     .base = s->seq};
}

/* ---- collectives ---- */

/* fp32 or bf16 alike: entries hold the dtype's elements (a bf16 chunk is twice
 * as many elements in the same bytes), reductions sum in fp32 in rank order. */
static int shm_all_reduce(comm *c, const void *send, void *recv, size_t n, comm_dtype dt,
                          comm_op op)
{
    shm_state *s = c->be_state;
    size_t es = comm_dtype_size(dt);
    shm_job j = job_new(s, COLL_ALL_REDUCE, send, recv, n, es, op);
    j.dt = dt;
    if (n * es <= SMALL_ALL_REDUCE && n * es <= s->entry) {
        j.direct = 1;
        j.chunks = 1;
    } else {
        j.step = ((s->entry / es / (size_t)s->n) & ~(size_t)15) * (size_t)s->n;
        j.chunks = (n + j.step - 1) / j.step;
    }
    return run_job(c, s, &j);
}

static int shm_reduce_scatter(comm *c, const void *send, void *recv, size_t n, comm_dtype dt,
                              comm_op op)
{
    shm_state *s = c->be_state;
    size_t es = comm_dtype_size(dt);
    shm_job j = job_new(s, COLL_REDUCE_SCATTER, send, recv, n, es, op);
    j.dt = dt;
    size_t seg = (n + (size_t)s->n - 1) / (size_t)s->n;
    j.step = (s->entry / es / (size_t)s->n) & ~(size_t)15;
    j.chunks = (seg + j.step - 1) / j.step;
    return run_job(c, s, &j);
}

static int shm_all_gather(comm *c, const void *send, void *recv, size_t n, size_t es)
{
    shm_state *s = c->be_state;
    shm_job j = job_new(s, COLL_ALL_GATHER, send, recv, n, es, COMM_SUM);
    size_t seg = (n + (size_t)s->n - 1) / (size_t)s->n;
    j.step = ((s->entry / (size_t)s->n) & ~(size_t)63) / es;
    j.chunks = (seg + j.step - 1) / j.step;
    int rc = run_job(c, s, &j);
    /* Own chunk last: in place, send lies inside recv and was read above first. */
    size_t ro, rl;
    comm_chunk(n, s->n, s->me, &ro, &rl);
    if (rc == COMM_OK && rl && (const char *)recv + ro * es != (const char *)send)
        memmove((char *)recv + ro * es, send, rl * es);
    return rc;
}

static int shm_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    shm_state *s = c->be_state;
    shm_job j = job_new(s, COLL_BROADCAST, buf, buf, bytes, 1, COMM_SUM);
    j.root = root;
    j.chunks = (bytes + s->entry - 1) / s->entry;
    return run_job(c, s, &j);
}

static int shm_barrier(comm *c)
{
    shm_state *s = c->be_state;
    shm_job j = job_new(s, COLL_BARRIER, NULL, NULL, 0, 1, COMM_SUM);
    j.chunks = 1;
    return run_job(c, s, &j);
}

/* ---- send / recv through the mailboxes ---- */

static void ring_copy_in(char *ring, size_t cap, uint64_t pos, const void *src, size_t len)
{
    size_t at = (size_t)(pos % cap), first = min_sz(len, cap - at);
    memcpy(ring + at, src, first);
    memcpy(ring, (const char *)src + first, len - first);
}

static void ring_copy_out(void *dst, const char *ring, size_t cap, uint64_t pos, size_t len)
{
    size_t at = (size_t)(pos % cap), first = min_sz(len, cap - at);
    memcpy(dst, ring + at, first);
    memcpy((char *)dst + first, ring, len - first);
}

static int shm_p2p_progress(comm *c, p2p_op *op)
{
    shm_state *s = c->be_state;
    if (atomic_load_explicit(&s->hdr->abort_word, memory_order_relaxed)) {
        char what[128];
        snprintf(what, sizeof what, "%s in %s", op->is_send ? "send" : "recv", c->name);
        return shm_aborted(c, s, what);
    }
    int src = op->is_send ? s->me : op->peer, dst = op->is_send ? op->peer : s->me;
    shm_mbox *mb = &s->mctl[(size_t)src * (size_t)s->n + (size_t)dst];
    char *ring_buf = s->mbox + ((size_t)src * (size_t)s->n + (size_t)dst) * s->mbox_bytes;
    size_t cap = s->mbox_bytes, moved = 0;
    if (op->is_send) {
        uint64_t head = atomic_load_explicit(&mb->head, memory_order_relaxed);
        uint64_t tail = atomic_load_explicit(&mb->tail, memory_order_acquire);
        size_t space = cap - (size_t)(head - tail);
        if (op->hdr_done == 0)
            op->hdr = op->bytes;
        if (op->hdr_done < 8 && space > 0) {
            size_t k = min_sz(8 - op->hdr_done, space);
            ring_copy_in(ring_buf, cap, head, (char *)&op->hdr + op->hdr_done, k);
            op->hdr_done += k, head += k, space -= k, moved += k;
        }
        if (op->hdr_done == 8 && space > 0 && op->done < op->bytes) {
            size_t k = min_sz(op->bytes - op->done, space);
            ring_copy_in(ring_buf, cap, head, op->buf + op->done, k);
            op->done += k, head += k, moved += k;
        }
        if (moved) {
            atomic_store_explicit(&mb->head, head, memory_order_release);
            atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)moved, memory_order_relaxed);
            ring(s, dst);
        }
    } else {
        uint64_t tail = atomic_load_explicit(&mb->tail, memory_order_relaxed);
        uint64_t head = atomic_load_explicit(&mb->head, memory_order_acquire);
        size_t avail = (size_t)(head - tail);
        if (op->hdr_done < 8 && avail > 0) {
            size_t k = min_sz(8 - op->hdr_done, avail);
            ring_copy_out((char *)&op->hdr + op->hdr_done, ring_buf, cap, tail, k);
            op->hdr_done += k, tail += k, avail -= k, moved += k;
            if (op->hdr_done == 8 && op->hdr != op->bytes) {
                char who[64];
                return comm_fail(c, COMM_EINVAL,
                                 "recv from %s in %s: message of %llu bytes, expected %zu",
                                 comm_peer_name(c, op->peer, who), c->name,
                                 (unsigned long long)op->hdr, op->bytes);
            }
        }
        if (op->hdr_done == 8 && avail > 0 && op->done < op->bytes) {
            size_t k = min_sz(op->bytes - op->done, avail);
            ring_copy_out(op->buf + op->done, ring_buf, cap, tail, k);
            op->done += k, tail += k, moved += k;
        }
        if (moved) {
            atomic_store_explicit(&mb->tail, tail, memory_order_release);
            ring(s, src);
        }
    }
    return op->hdr_done == 8 && op->done == op->bytes;
}

static unsigned shm_p2p_token(comm *c)
{
    shm_state *s = c->be_state;
    return atomic_load(&s->ctl[s->me].bell);
}

static void shm_p2p_sleep(comm *c, unsigned token, const p2p_wait *w, int nw, double until)
{
    shm_state *s = c->be_state;
    double spin_until = clock_now_s() + shm_spin(s);
    while (atomic_load(&s->ctl[s->me].bell) == token && clock_now_s() < spin_until)
        for (int i = 0; i < 64; i++)
            cpu_relax();
    sleep_on_bell(s, token, until - clock_now_s());
}

static void shm_p2p_kick(comm *c)
{
    shm_state *s = c->be_state;
    ring(s, s->me);
}

static int shm_p2p_check_peer(comm *c, int peer)
{
    shm_state *s = c->be_state;
    char what[128];
    snprintf(what, sizeof what, "send/recv in %s", c->name);
    if (atomic_load(&s->hdr->abort_word))
        return shm_aborted(c, s, what);
    if (!comm_pid_alive(s->ctl[peer].pid))
        return shm_abort(c, s, what, peer, ABORT_DIED);
    return COMM_OK;
}

static void shm_destroy(comm *c)
{
    comm_cpu_stop(c);
    shm_state *s = c->be_state;
    if (!s)
        return;
    if (s->base)
        munmap(s->base, s->len);
    free(s->srcs);
    free(s->srcs16);
    free(s);
    c->be_state = NULL;
}

static const comm_cpu_ops shm_ops = {
    .all_reduce = shm_all_reduce,
    .reduce_scatter = shm_reduce_scatter,
    .all_gather = shm_all_gather,
    .broadcast = shm_broadcast,
    .barrier = shm_barrier,
    .p2p_progress = shm_p2p_progress,
    .p2p_token = shm_p2p_token,
    .p2p_sleep = shm_p2p_sleep,
    .p2p_kick = shm_p2p_kick,
    .p2p_check_peer = shm_p2p_check_peer,
    .bf16_native = 1,
};

/* ---- creation ---- */

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static int shm_create(comm *c)
{
    c->cpu = &shm_ops;
    static _Atomic unsigned counter;
    int n = c->size, me = c->rank;
    shm_state *s = calloc(1, sizeof *s);
    if (!s || !(s->srcs = calloc((size_t)n, sizeof *s->srcs)) ||
        !(s->srcs16 = calloc((size_t)n, sizeof *s->srcs16))) {
        if (s)
            free(s->srcs);
        free(s);
        return comm_fail(c, COMM_ESYS, "%s: out of memory", c->name);
    }
    c->be_state = s;
    s->n = n;
    s->me = me;
    /* An entry: big enough to amortise the per-chunk signalling, small enough
     * that a chunk is still in cache when the peer reads it. The depth lets a
     * rank run ahead of a momentarily descheduled peer. */
    const dt_env *env = dt_env_get();
    s->entry = round_up(env->comm_shm_chunk, 4096);
    if (s->entry < (size_t)n * 16 * 1024)
        s->entry = round_up((size_t)n * 16 * 1024, 4096);
    s->depth = env->comm_shm_depth;
    /* Many local ranks: keep the staging under 128 MiB per communicator. */
    size_t fit = ((size_t)128 << 20) / ((size_t)n * s->entry);
    if (!env->comm_shm_depth_set && fit < s->depth)
        s->depth = fit < 2 ? 2 : fit;
    /* A mailbox per ordered pair: 64 MiB over the pairs, 16 KiB to 4 MiB each.
     * A message larger than its mailbox goes through in turns, each a doorbell
     * and, on a busy machine, a wake-up: with 256 KiB mailboxes an 8 MiB
     * exchange each way took 32 turns and 3-6x the time of an all_gather of
     * the same bytes (2 ranks, load 8); 4 MiB brings it under it. Pages are
     * touched only as far as the traffic reaches. */
    size_t mb = (64u << 20) / ((size_t)n * (size_t)(n - 1));
    mb = mb < (16 << 10) ? (16 << 10) : mb > (4096 << 10) ? (4096 << 10) : mb;
    s->mbox_bytes = round_up(mb, 4096);
    /* Spinning pays when every rank of the node has a core: a rank that went to
     * sleep on the futex pays the wake-up when its tensor comes, which on a VM
     * can be half a millisecond (a CI machine measured 25 % idle on the first
     * stage of a 1F1B pipeline waiting on 2 ms micro-batches), so wait on the
     * CPU for up to a millisecond first, as MPI's shared-memory transports do.
     * Oversubscribed (more ranks on the node than cores, counted over the whole
     * node: a two-rank group of an eight-rank job is not alone), spinning only
     * steals the core from the rank being waited for. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long local = env->local_world_size > 0 ? env->local_world_size : n;
    if (local < n) local = n;
    s->spin_s = 1e-6 * (double)(env->comm_spin_us >= 0 ? env->comm_spin_us : local <= cpus ? 1000 : 0);

    size_t off_ctl = sizeof(shm_header);
    size_t off_mctl = off_ctl + (size_t)n * sizeof(shm_ctl);
    size_t off_slots = round_up(off_mctl + (size_t)n * (size_t)n * sizeof(shm_mbox), 4096);
    size_t off_mbox = off_slots + (size_t)n * s->depth * s->entry;
    size_t total = off_mbox + (size_t)n * (size_t)n * s->mbox_bytes;

    char name[128], key[400];
    snprintf(key, sizeof key, "%s/shm", c->id);
    int fd = -1, rc = COMM_OK;
    if (me == 0) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        shm_name_format(name, sizeof name, getpid(), atomic_fetch_add(&counter, 1), (unsigned long)t.tv_nsec);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
            return comm_fail(c, COMM_ESYS, "%s: shm_open %s: %s", c->name, name, strerror(errno));
        /* Allocate now: a full /dev/shm is an error here, not a SIGBUS later. */
        int e = ftruncate(fd, (off_t)total) != 0 ? errno : posix_fallocate(fd, 0, (off_t)total);
        if (e != 0) {
            close(fd);
            shm_unlink(name);
            return comm_fail(c, COMM_ESYS, "%s: cannot allocate %zu bytes of shared memory "
                             "(%s): %s", c->name, total, name, strerror(e));
        }
    } else {
        long len = store_get(c->store, key, name, sizeof name - 1, c->timeout);
        if (len < 0)
            return comm_fail(c, COMM_ESTORE, "%s: waiting for rank 0's shared memory: %s",
                             c->name, store_last_error(c->store));
        name[(size_t)len < sizeof name ? (size_t)len : sizeof name - 1] = '\0';
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
            return comm_fail(c, COMM_ESYS, "%s: shm_open %s (made by rank 0): %s", c->name, name,
                             strerror(errno));
    }
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        rc = comm_fail(c, COMM_ESYS, "%s: mmap %zu bytes of %s: %s", c->name, total, name,
                       strerror(errno));
        shm_unlink(name);
        return rc;
    }
    s->base = base;
    s->len = total;
    s->hdr = (shm_header *)s->base;
    s->ctl = (shm_ctl *)(s->base + off_ctl);
    s->mctl = (shm_mbox *)(s->base + off_mctl);
    s->entries = s->base + off_slots;
    s->mbox = s->base + off_mbox;
    if (me == 0) {
        /* ftruncate zeroed it: counters, bells and the abort word start at 0. */
        s->hdr->nranks = (uint32_t)n;
        s->hdr->entry_bytes = s->entry;
        s->hdr->depth = (uint32_t)s->depth;
        s->hdr->mbox_bytes = s->mbox_bytes;
        s->hdr->total_bytes = total;
        s->hdr->magic = SHM_MAGIC;
    } else if (s->hdr->magic != SHM_MAGIC || s->hdr->nranks != (uint32_t)n ||
               s->hdr->total_bytes != total) {
        shm_unlink(name);
        return comm_fail(c, COMM_EINVAL, "%s: shared memory %s does not match this group "
                         "(ranks disagree on DTRUN_COMM_SHM_*?)", c->name, name);
    }
    s->ctl[me].pid = (int32_t)getpid();
    if (me == 0 && store_set(c->store, key, name, strlen(name)) != 0) {
        shm_unlink(name);
        return comm_fail(c, COMM_ESTORE, "%s: %s", c->name, store_last_error(c->store));
    }
    snprintf(key, sizeof key, "%s/shm-mapped", c->id);
    if (store_barrier(c->store, key, n, c->timeout) != 0)
        rc = comm_fail(c, COMM_ESTORE, "%s: not every rank mapped the shared memory: %s",
                       c->name, store_last_error(c->store));
    /* Everyone mapped it (or gave up): the name is no longer needed. */
    if (shm_unlink(name) != 0 && errno != ENOENT && rc == COMM_OK)
        rc = comm_fail(c, COMM_ESYS, "%s: shm_unlink %s: %s", c->name, name, strerror(errno));
    return rc;
}

const comm_backend comm_backend_shm = {
    .name = "shm",
    .memory = COMM_MEM_HOST,
    .probe = comm_cpu_probe,
    .world_accepts = comm_cpu_world_accepts,
    .create = shm_create,
    .destroy = shm_destroy,
    .stream = comm_cpu_stream,
    .coll_start = comm_cpu_coll_start,
    .p2p_start = comm_cpu_p2p_start,
    .wait = comm_cpu_wait,
    .device_wait = comm_cpu_device_wait,
};
