/* comm_internal.h — what the pieces of the communication layer share: the
 * communicator struct, the one backend interface (self, shm, tcp, nccl), the
 * CPU transports' host functions and engine, the point-to-point operation, the
 * reduction kernels. Private to runtime/comm. */
#ifndef DTRUN_COMM_INTERNAL_H
#define DTRUN_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/util/clock.h"
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

/* ---- collectives, as data ---- */

typedef enum { COLL_ALL_REDUCE, COLL_REDUCE_SCATTER, COLL_ALL_GATHER, COLL_BROADCAST,
               COLL_BARRIER, COLL_ALL_TO_ALL } coll_kind;

typedef struct {
    coll_kind kind;
    const void *send;
    void *recv;
    size_t count;
    comm_dtype dt;
    comm_op op;
    int root;
    /* COLL_ALL_TO_ALL: elements to and from each rank (size entries each);
     * count is then the sum of send_counts */
    const size_t *send_counts, *recv_counts;
} coll_args;

typedef struct comm_peer_info comm_peer_info;

/* ---- the backend interface ----
 *
 * One table per backend (self, shm, tcp, nccl), every entry filled, libuv
 * style: comm.c picks an entry for each communicator (comm_setup_transport)
 * and only ever calls through it. Every operation is STARTED and hands back
 * a request; comm_wait completes it through `wait`. The blocking API is
 * start + wait, written once in comm.c.
 *
 * The CPU transports (self, shm, tcp) share their start / wait entries
 * (comm_cpu.c): collectives queue for the communicator's worker thread
 * (comm_queue.c), sends and receives for the progress engine (comm_p2p.c),
 * and both drive the transport's synchronous host functions (comm_cpu_ops
 * below). NCCL enqueues on its own CUDA stream, and its request waits on an
 * event recorded after the operation (comm_nccl.c). */

typedef enum {
    COMM_MEM_HOST = 0,           /* buffers must be host memory */
    COMM_MEM_DEVICE = 1,         /* buffers may be device memory (host ones it stages itself) */
} comm_mem;

typedef struct comm_backend {
    const char *name;            /* what comm_transport() says */
    /* Where its buffers live. comm.c stages device buffers through host
     * memory for a COMM_MEM_HOST backend (comm_stage.c). */
    comm_mem memory;
    /* The device this process would use with the backend, as the world
     * publishes it to the peers (a GPU's PCI bus id): into dev, or "" with the
     * reason in why. Host backends answer "". Called before the world exists. */
    void (*probe)(char *dev, size_t len, char *why, size_t whylen);
    /* The world's choice (comm_world_init, from every rank's published info):
     * 1 = the world's groups use this backend, 0 = not (auto falls back to the
     * CPU transports), < 0 = an error when `forced` (one line in err). */
    int (*world_accepts)(const comm *world, int forced, const char *my_why, char *err,
                         size_t errlen);
    /* Builds c->be_state for a communicator whose members, ids, name and store
     * are set. COMM_OK or an error (comm_fail'ed). destroy undoes it (also
     * after a failed create) and stops the backend's threads. */
    int (*create)(comm *c);
    void (*destroy)(comm *c);
    /* The queue its operations run on: a cudaStream_t for NCCL, NULL for the
     * CPU transports (their worker thread and progress engine). */
    void *(*stream)(const comm *c);
    /* Starts a collective (arguments checked by comm.c; count may be 0, which
     * still counts in the communicator's sequence) or a send / receive (count
     * elements of dt to / from peer). *req gets the request, or NULL when
     * nothing is left to wait for. `blocking`: the caller waits for it right
     * away (the synchronous API), so the backend may run it on the calling
     * thread (the CPU transports do when nothing is queued: no thread hop).
     * COMM_OK or the error (comm_fail'ed, *req NULL). */
    int (*coll_start)(comm *c, const coll_args *a, int blocking, comm_req **req);
    int (*p2p_start)(comm *c, int is_send, void *buf, size_t count, comm_dtype dt, int peer,
                     int blocking, comm_req **req);
    /* Completes a request (bounded by the communicator's timeout), frees it
     * and returns its status. */
    int (*wait)(comm_req *req);
    /* comm_wait_device: waits until the device ran what the compute stream
     * holds so far, watched like one of the backend's operations (NCCL: an
     * event on the compute stream, polled against the timeout and the
     * communicators' asynchronous errors). The CPU transports answer COMM_OK:
     * nothing of theirs is queued on the device. */
    int (*device_wait)(comm *c, const char *what);
} comm_backend;

extern const comm_backend comm_backend_self;
extern const comm_backend comm_backend_shm;
extern const comm_backend comm_backend_tcp;
extern const comm_backend comm_backend_nccl;

/* What every request starts with; a backend's own request embeds it first. */
struct comm_req {
    comm *c;
    struct comm_stage *stage;    /* device buffers staged through host memory (comm_stage.c) */
};

/* ---- the CPU transports' synchronous host functions (comm_cpu.c drives them) ---- */

typedef struct {
    /* Collectives on fp32 or bf16 (reductions) or raw elements of esize bytes.
     * n is the element count, > 0 (comm_cpu.c answers n = 0 itself). Return
     * COMM_OK or the code of comm_fail(). A reduction gets dt COMM_BF16 only
     * from a transport that sets bf16_native: it moves bf16 between ranks (half
     * the bytes of fp32) and still sums each element in fp32, rounding once
     * (comm_reduce_bf16). For the others comm_cpu.c widens bf16 to fp32 around
     * the call. */
    int (*all_reduce)(comm *c, const void *send, void *recv, size_t n, comm_dtype dt, comm_op op);
    int (*reduce_scatter)(comm *c, const void *send, void *recv, size_t n, comm_dtype dt,
                          comm_op op);
    int bf16_native;
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
} comm_cpu_ops;

/* The entries the CPU backends share (comm_cpu.c). */
void comm_cpu_probe(char *dev, size_t len, char *why, size_t whylen);
int comm_cpu_world_accepts(const comm *world, int forced, const char *my_why, char *err,
                           size_t errlen);
void *comm_cpu_stream(const comm *c);
int comm_cpu_coll_start(comm *c, const coll_args *a, int blocking, comm_req **req);
int comm_cpu_p2p_start(comm *c, int is_send, void *buf, size_t count, comm_dtype dt, int peer,
                       int blocking, comm_req **req);
int comm_cpu_wait(comm_req *req);
int comm_cpu_device_wait(comm *c, const char *what);
/* Stops the worker thread and the progress engine; first step of a CPU
 * backend's destroy. */
void comm_cpu_stop(comm *c);

/* ---- the communicator ---- */

struct comm_peer_info {
    int pid;
    char node[128];        /* GROUP_RANK or host name: equal = same node */
    char host[128];
    char gpu[32];          /* device the world's device backend would use (probe); "" = none */
};

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
    /* World only: the device backend its groups use (NULL = the CPU
     * transports), and whether for every communicator (forced by
     * DTRUN_COMM_BACKEND) or only for groups of two or more (auto). */
    const comm_backend *device_be;
    int device_be_forced;
    /* CPU transports: the host functions the worker thread and the progress
     * engine drive (set by the backend's create). */
    const comm_cpu_ops *cpu;

    /* Errors: the first one wins and breaks the communicator. */
    pthread_mutex_t err_mu;
    _Atomic int status;
    char err[640];

    /* Collectives issued so far (comm_coll_label); the CPU transports keep the
     * running one's label for their messages. */
    char label[160];
    uint64_t coll_seq;

    /* CPU transports: bf16 staging, used only by the thread that runs collectives. */
    float *stage;
    size_t stage_cap;            /* floats */

    /* Bytes this rank has handed to its peers through the transport (TCP:
     * written to sockets; shm: written into the shared segment for the peers
     * to read), collectives and send / recv alike: comm_bytes_sent. */
    _Atomic uint64_t bytes_sent;

    /* comm_group: how many times this process made each member list. */
    struct group_count *groups;

    comm_queue *queue;
    comm_p2p *p2p;
};

/* Records the first error (one line, printf style), breaks the communicator and
 * returns code, so backends write `return comm_fail(c, COMM_EPEER, ...)`. */
int comm_fail(comm *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "rank 7": member r by its global rank, into buf (64 bytes). */
const char *comm_peer_name(const comm *c, int r, char *buf);

/* 1 while the process lives (a zombie counts as dead), 0 once it is gone. */
int comm_pid_alive(int pid);

/* ---- reductions (comm_reduce.c) ---- */

/* dst[i] = src[0][i] op src[1][i] op … (in that order, fp32). With COMM_AVG the
 * sum is divided by avg_div (the group size; 1 = a partial sum, divide later).
 * dst2 (may be NULL) gets a copy. dst and dst2 may alias a src at the same index. */
void comm_reduce_f32(float *dst, float *dst2, const float *const *src, int nsrc, size_t n,
                     comm_op op, int avg_div);
/* The same reduction of bf16 sources: each element widened to fp32, summed
 * (or maxed) in source order in fp32, divided for COMM_AVG, and rounded once
 * to bf16 (nearest, ties to even), into dst and dst2 (may be NULL): the bits
 * that widening everything, comm_reduce_f32 and comm_f32_to_bf16 give. */
void comm_reduce_bf16(uint16_t *dst, uint16_t *dst2, const uint16_t *const *src, int nsrc,
                      size_t n, comm_op op, int avg_div);
void comm_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void comm_f32_to_bf16(uint16_t *dst, const float *src, size_t n);

/* ---- what every backend shares (comm_common.c) ---- */

/* "all_reduce", "reduce_scatter", … : the one table of collective names. */
const char *comm_coll_name(coll_kind k);
/* Counts a newly issued collective in c's sequence and in this process's, and
 * writes its label for messages and the beacon into buf:
 * "all_reduce #12 of group[0,2] (rank 2's collective #31)". */
void comm_coll_label(comm *c, coll_kind k, char *buf, size_t len);
/* Elements of send and of recv that collective a reads / writes on this rank. */
void comm_coll_extent(const comm *c, const coll_args *a, size_t *nsend, size_t *nrecv);

/* ---- the CPU transports' engine ---- */

/* A request of the CPU transports: a queued collective or a p2p op. */
typedef struct cpu_req cpu_req;
struct cpu_req {
    comm_req base;               /* first: a comm_req * is a cpu_req * */
    int is_p2p;
    coll_args args;
    p2p_op op;
    int status;
    int done;                    /* guarded by the owner's mutex */
    cpu_req *next;
};

/* Collectives in issue order (comm_queue.c): started on the caller's thread
 * when blocking and nothing is queued, else queued for the worker thread. */
int comm_queue_start(comm *c, const coll_args *a, int blocking, cpu_req **req);
int comm_queue_wait(cpu_req *req);
/* Executes one collective on this thread (comm_cpu.c): bf16 staging, labels. */
int comm_coll_exec(comm *c, const coll_args *a);
void comm_queue_destroy(comm *c);

/* Point to point (comm_p2p.c). A blocking op is posted and then driven by
 * its wait; an asynchronous one also moves in the background. */
int comm_p2p_start(comm *c, int is_send, void *buf, size_t bytes, int peer, int blocking,
                   cpu_req **req);
int comm_p2p_wait(cpu_req *req);
void comm_p2p_destroy(comm *c);

struct comm_stage;                      /* comm_stage.c */

/* ---- device buffers (comm_stage.c; real only in a CUDA build) ----
 * The API takes host or device pointers on every backend. A COMM_MEM_HOST
 * backend (self, shm, tcp) needs host memory, so comm.c stages device buffers
 * through host copies here, in one place; a COMM_MEM_DEVICE backend (NCCL)
 * stages host buffers the other way inside its request (comm_nccl.c), so that
 * one event covers the copies and the operation. */

/* The compute queue of the ops table set by comm_set_ops (a cudaStream_t), or
 * NULL: no table, or one that computes on the host. */
void *comm_compute_stream(void);
/* 1 when this process has a device in use (the ops table has a stream): only
 * then may a buffer be device memory, and only then is it worth asking. */
int comm_dev_active(void);
/* 1 when p is memory only the device can touch (cudaMalloc'ed); 0 for host
 * memory, managed memory (the host may touch it) and NULL. */
int comm_dev_is_device(const void *p);
/* 1 when p is plain or pinned host memory (or memory CUDA does not know),
 * which a device backend must stage; 0 for device or managed memory and NULL. */
int comm_dev_is_host(const void *p);
/* 1 while the compute stream is being recorded into a CUDA graph (ops.h
 * graph_begin; train.cuda_graphs), also when that recording already failed:
 * an operation started now is recorded, not run, so it may neither touch
 * host memory nor be waited for on the host (comm_nccl.c waits in stream
 * order instead; comm.c refuses what cannot be recorded). 0 otherwise and
 * without a device. */
int comm_dev_capturing(void);
/* A collective or a send / receive on a COMM_MEM_HOST backend with device
 * buffers: copies them through host memory (on the compute stream, which
 * never waits for unfinished communication, so each copy is bounded), around
 * the backend's start. Same contract as coll_start / p2p_start; the request
 * carries its staging to comm_wait. */
int comm_stage_coll(comm *c, const coll_args *a, int blocking, comm_req **req);
int comm_stage_p2p(comm *c, int is_send, void *buf, size_t count, comm_dtype dt, int peer,
                   int blocking, comm_req **req);
/* comm_wait's last step for a staged request whose wait returned `status`:
 * copies the result to the device (when status is COMM_OK), frees the
 * staging, returns the final status. */
int comm_stage_finish(struct comm_stage *st, int status);

/* Set in the threads the comm layer starts (the asynchronous-collective queue,
 * the send/recv engine): they wait for peers while the caller computes on the
 * same core, so they poll only briefly before sleeping (comm_cpu_shm.c). */
extern _Thread_local int comm_background_thread;

#endif
