/* comm_internal.h — what the pieces of the communication layer share: the
 * communicator struct, the backend interface (self, shm, tcp), the point-to-point
 * operation, the reduction kernels. Private to runtime/comm. */
#ifndef DTRUN_COMM_INTERNAL_H
#define DTRUN_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/comm/comm.h"

/* ---- point to point ---- */

/* One send or receive. Messages carry an 8-byte header with the payload length
 * so that a count mismatch is an error, not garbage. */
typedef struct p2p_op p2p_op;
struct p2p_op {
    int is_send;
    int peer;
    char *buf;
    size_t bytes;
    size_t done;           /* payload bytes moved */
    size_t hdr_done;       /* header bytes moved (0..8) */
    uint64_t hdr;          /* the length, as sent or as received */
    double deadline;
    int status;            /* COMM_OK or the error */
    int finished;
    int async;             /* 1: a comm_req waits for it; the engine frees nothing */
    p2p_op *next;          /* FIFO per (peer, direction) */
};

/* What a sleeping p2p waiter waits for: peer and direction of a queue's head. */
typedef struct {
    int peer;
    int is_send;
} p2p_wait;

/* ---- backends ---- */

typedef struct {
    const char *name;
    /* Collectives on fp32 (reductions) or raw elements of esize bytes. n is the
     * element count, > 0 (comm.c answers n = 0 itself). Return COMM_OK or the
     * code of comm_fail(). */
    int (*all_reduce)(comm *c, const float *send, float *recv, size_t n, comm_op op);
    int (*reduce_scatter)(comm *c, const float *send, float *recv, size_t n, comm_op op);
    int (*all_gather)(comm *c, const void *send, void *recv, size_t n, size_t esize);
    int (*broadcast)(comm *c, void *buf, size_t bytes, int root);
    int (*barrier)(comm *c);
    /* Point to point, called with the p2p lock held: move what can move without
     * blocking. 1 = finished, 0 = not yet, < 0 = error (already comm_fail'ed). */
    int (*p2p_progress)(comm *c, p2p_op *op);
    /* Token read before progressing and handed to p2p_sleep, so that a wakeup
     * between the two is not lost. */
    unsigned (*p2p_token)(comm *c);
    /* Sleeps (without the lock) until the heads in w may progress, or `until`. */
    void (*p2p_sleep)(comm *c, unsigned token, const p2p_wait *w, int nw, double until);
    /* Wakes a thread sleeping in p2p_sleep (a new op was posted). */
    void (*p2p_kick)(comm *c);
    /* A p2p op waits for `peer`: COMM_OK if it still lives, else comm_fail'ed. */
    int (*p2p_check_peer)(comm *c, int peer);
    void (*destroy)(comm *c);
} comm_backend;

extern const comm_backend comm_backend_self;
extern const comm_backend comm_backend_shm;
extern const comm_backend comm_backend_tcp;

/* Creates the backend's state (c->be_state) for a communicator whose members,
 * ids and store are set. COMM_OK or an error (comm_fail'ed). */
int comm_shm_create(comm *c);
int comm_tcp_create(comm *c);

/* ---- the communicator ---- */

typedef struct {
    int pid;
    char node[128];        /* GROUP_RANK or host name: equal = same node */
    char host[128];
    char gpu[32];          /* PCI bus id of the GPU NCCL would use; "" = none */
} comm_peer_info;

typedef struct comm_queue comm_queue;   /* comm_queue.c: asynchronous collectives */
typedef struct comm_p2p comm_p2p;       /* comm_p2p.c: point-to-point engine */

struct comm {
    int rank, size;
    int *world_ranks;            /* size entries */
    comm *world;                 /* the world communicator (itself for the world) */
    comm_peer_info *info;        /* world only: one per world rank */
    comm_store *store;           /* borrowed */
    char id[256];                /* unique store-key prefix of this communicator */
    char name[96];               /* "world", "group[0,2,4]" for messages */
    double timeout;
    const comm_backend *be;
    void *be_state;
    /* World only: 1 = NCCL for groups of two or more (auto), 2 = NCCL for every
     * communicator (DTRUN_COMM_BACKEND=nccl), 0 = the CPU transports. */
    int nccl_mode;

    /* Errors: the first one wins and breaks the communicator. */
    pthread_mutex_t err_mu;
    _Atomic int status;
    char err[640];

    /* The collective being run (one at a time): its label for messages. */
    char label[160];
    uint64_t coll_seq;

    /* bf16 staging, used only by the thread that runs collectives. */
    float *stage;
    size_t stage_cap;            /* floats */

    /* comm_group: how many times this process made each member list. */
    struct group_count *groups;

    comm_queue *queue;
    comm_p2p *p2p;
};

/* Seconds on the monotonic clock. */
double comm_now(void);

/* Records the first error (one line, printf style), breaks the communicator and
 * returns code, so backends write `return comm_fail(c, COMM_EPEER, ...)`. */
int comm_fail(comm *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "rank 3" or "rank 3 (world 7)", into buf (64 bytes). */
const char *comm_peer_name(const comm *c, int r, char *buf);

/* 1 while the process lives (a zombie counts as dead), 0 once it is gone. */
int comm_pid_alive(int pid);

/* ---- reductions (comm_reduce.c) ---- */

/* dst[i] = src[0][i] op src[1][i] op … (in that order, fp32). With COMM_AVG the
 * sum is divided by avg_div (the group size; 1 = a partial sum, divide later).
 * dst2 (may be NULL) gets a copy. dst and dst2 may alias a src at the same index. */
void comm_reduce_f32(float *dst, float *dst2, const float *const *src, int nsrc, size_t n,
                     comm_op op, int avg_div);
void comm_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void comm_f32_to_bf16(uint16_t *dst, const float *src, size_t n);

/* ---- asynchronous machinery ---- */

/* A collective, described so that the caller or a worker thread can run it. */
typedef enum { COLL_ALL_REDUCE, COLL_REDUCE_SCATTER, COLL_ALL_GATHER, COLL_BROADCAST,
               COLL_BARRIER } coll_kind;

typedef struct {
    coll_kind kind;
    const void *send;
    void *recv;
    size_t count;
    comm_dtype dt;
    comm_op op;
    int root;
} coll_args;

/* Runs a collective now (caller) or after the queued ones (blocking either way). */
int comm_queue_run(comm *c, const coll_args *a);
/* Queues a collective for the worker thread. */
int comm_queue_submit(comm *c, const coll_args *a, comm_req **req);
/* Executes one collective on this thread (comm.c): dtype staging, labels. */
int comm_coll_exec(comm *c, const coll_args *a);
void comm_queue_destroy(comm *c);

/* Point to point (comm_p2p.c). */
int comm_p2p_run(comm *c, int is_send, void *buf, size_t bytes, int peer);
int comm_p2p_submit(comm *c, int is_send, void *buf, size_t bytes, int peer, comm_req **req);
void comm_p2p_destroy(comm *c);
/* comm_wait's halves. */
int comm_queue_wait(comm_req *req);
int comm_p2p_wait(comm_req *req);

struct comm_stage;                      /* comm_stage.c */

/* A request: either a queued collective or a p2p op (comm_queue.c / comm_p2p.c). */
struct comm_req {
    comm *c;
    int is_p2p;
    coll_args args;
    p2p_op op;
    int status;
    int done;                    /* guarded by the owner's mutex */
    comm_req *next;
    void *nccl;                  /* an NCCL request (comm_nccl.c), else NULL */
    struct comm_stage *stage;    /* device buffers staged through host memory */
};

/* ---- device buffers (comm_stage.c; real only in a CUDA build) ----
 * The API takes host or device pointers on every transport. The CPU
 * transports (self, shm, tcp) need host memory, so device buffers are staged
 * through host copies here, in one place; the NCCL backend stages host buffers
 * the other way itself (comm_nccl.c). */

/* 1 when this process has a CUDA device in use (the CUDA ops are set up):
 * only then may a buffer be device memory, and only then is it worth asking. */
int comm_dev_active(void);
/* 1 when p is memory only the device can touch (cudaMalloc'ed); 0 for host
 * memory, managed memory (the host may touch it) and NULL. */
int comm_dev_is_device(const void *p);
/* A collective or a send / receive on a CPU transport with device buffers:
 * copies them through host memory (on the compute stream, which never waits
 * for unfinished communication, so each copy is bounded). Same contract as the
 * unstaged calls; an asynchronous request carries its staging to comm_wait. */
int comm_stage_coll(comm *c, const coll_args *a, comm_req **req);
int comm_stage_p2p(comm *c, int is_send, void *buf, size_t bytes, int peer, comm_req **req);
/* comm_wait's last step for a staged request whose wait returned `status`:
 * copies the result to the device (when status is COMM_OK), frees the
 * staging, returns the final status. */
int comm_stage_finish(struct comm_stage *st, int status);

/* Set in the threads the comm layer starts (the asynchronous-collective queue,
 * the send/recv engine): they wait for peers while the caller computes on the
 * same core, so they poll only briefly before sleeping (comm_cpu_shm.c). */
extern _Thread_local int comm_background_thread;

#endif
