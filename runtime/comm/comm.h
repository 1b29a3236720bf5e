/* comm.h — the one communication API of the worker: communicators and collectives.
 *
 * A communicator (comm) is an ordered group of processes, numbered 0..size-1.
 * The world communicator comes from the torchrun environment (RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK) plus a bootstrap store (store.h);
 * sub-communicators (tp, dp, pp groups: see runtime/parallel/mesh.h) from comm_group.
 *
 * Transport, chosen per communicator: "self" for a group of one; "shm" when all
 * members are on one node (POSIX shared memory: a segment per communicator with
 * a slot per rank); "tcp" when they span nodes (a ring for collectives, a full
 * mesh for send/recv). DTRUN_COMM_TRANSPORT=tcp forces TCP (tests, debugging);
 * =shm insists on shared memory. Ranks are on one node when their GROUP_RANK
 * (the agent's node rank) agrees, or, without GROUP_RANK, their host names.
 * "nccl" (comm_nccl.h) when every rank computes on a GPU of its own: the world
 * decides once for all its groups (DTRUN_COMM_BACKEND=auto|nccl|cpu).
 *
 * Every transport is an entry of one asynchronous backend interface
 * (comm_internal.h): each operation is started and gives a request that
 * comm_wait completes; a blocking call is start + wait. The CPU transports run
 * collectives on a per-communicator worker thread and send / recv on a
 * progress engine; NCCL enqueues on its CUDA stream (comm_stream) and its
 * request waits on an event.
 *
 * Where compute runs comes from the ops table (comm_set_ops, before the
 * world): its memory capability and its stream. Buffers may be host or device
 * memory (a CUDA build with a device in use) on every transport: NCCL stages
 * host buffers through the device, the CPU transports stage device buffers
 * through the host (comm_stage.c). With NCCL a blocking call returns once the
 * operation finished on the device, and an operation starts after the work
 * queued so far on the compute stream (the ops table's stream); the timeout
 * of an NCCL operation counts from its issue, and a failure aborts every NCCL
 * communicator of the process.
 *
 * Contract (like NCCL / torch.distributed):
 *  - Every member calls the same collectives in the same order with the same
 *    count, dtype, op and root. Collectives on one communicator run in the order
 *    they were issued, blocking or not.
 *  - Buffers stay valid and untouched until the call returns (blocking) or its
 *    comm_wait returns (asynchronous).
 *  - Results are identical on every rank (bit for bit). On the shm transport a
 *    reduction sums in rank order 0, 1, …, size-1 in fp32, whatever the count.
 *  - dtype bf16 is reduced in fp32 internally and rounded once (to nearest even);
 *    the CPU transports move it as bf16 (half the bytes of fp32), summing each
 *    element in rank order on shm and tcp alike, so both give the same bits.
 *  - Any count, including 0. reduce_scatter / all_gather split `count` (the total
 *    length) into `size` chunks of ceil(count / size) elements, the last ones
 *    short or empty: comm_chunk() says which part a rank owns.
 *  - In place is allowed: all_reduce with send == recv; reduce_scatter with
 *    recv == send + chunk offset; all_gather with send == recv + chunk offset.
 *
 * Errors are answers: every call returns COMM_OK (0) or a negative COMM_E* code,
 * and comm_last_error(c) gives one line, e.g.
 *   "all_reduce (seq 12): rank 3 (world 7) died (pid 4242)"
 *   "all_reduce (seq 12): timed out after 60.0 s waiting for rank 3 (world 7)".
 * Every call is bounded by the communicator's timeout (DTRUN_COMM_TIMEOUT seconds,
 * default 60; comm_set_timeout). A dead peer becomes an error on every survivor
 * well within it: shm waiters watch the peers' pids, TCP sees EOF / reset. After
 * an error the communicator is broken: every later call fails with the same line
 * (the peers' step counters no longer agree); destroy it and rebuild the world.
 *
 * Threads: a communicator is driven from one thread; asynchronous operations run
 * on a per-communicator worker thread (collectives, in issue order) or progress
 * in the background (send / recv).
 *
 * Environment (all optional; read once, with the rest of the worker's, by
 * runtime/env.c — a test that changes one calls dt_env_reload()):
 *   DTRUN_COMM_BACKEND    auto (default), nccl or cpu (comm_nccl.h)
 *   DTRUN_NCCL_LIB        the NCCL library to dlopen (default libnccl.so.2)
 *   DTRUN_STORE           kv (default: the agent's KV store) or file:DIR
 *   DTRUN_COMM_TIMEOUT    seconds per call and for creating a communicator (60)
 *   DTRUN_COMM_TRANSPORT  auto (default), shm or tcp
 *   DTRUN_COMM_ADDR       address peers dial for tcp (default: the local address
 *                         of the route to MASTER_ADDR, else the host name's)
 *   DTRUN_COMM_SHM_CHUNK  shm staging entry, bytes (256K); DTRUN_COMM_SHM_DEPTH
 *                         entries per rank (16); DTRUN_COMM_SPIN_US busy-wait
 *                         before sleeping (1000 when every rank has a core, else 0) */
#ifndef DTRUN_COMM_H
#define DTRUN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/comm/store.h"

typedef struct comm comm;
typedef struct comm_req comm_req;

typedef enum { COMM_F32 = 0, COMM_BF16 = 1 } comm_dtype;
typedef enum { COMM_SUM = 0, COMM_AVG = 1, COMM_MAX = 2 } comm_op;

#define COMM_OK        0
#define COMM_EINVAL   (-1) /* bad argument (rank out of range, bad dtype, …) */
#define COMM_ETIMEOUT (-2) /* a peer did not answer within the timeout */
#define COMM_EPEER    (-3) /* a peer died or closed its connection */
#define COMM_ESYS     (-4) /* the system refused (shm, socket, memory) */
#define COMM_EBROKEN  (-5) /* an earlier call failed; the communicator is unusable */
#define COMM_ESTORE   (-6) /* the bootstrap store failed (while creating a comm) */

/* Bytes of one element. */
size_t comm_dtype_size(comm_dtype dt);

/* The part of a `count`-element buffer that rank `rank` of `size` owns in
 * reduce_scatter / all_gather: chunk = ceil(count / size) elements, rank r owns
 * [r * chunk, min(count, (r + 1) * chunk)), possibly empty. */
void comm_chunk(size_t count, int size, int rank, size_t *offset, size_t *len);

/* ---- communicators ---- */

struct dt_ops;

/* The ops table the worker computes with (kernels/ops.h), for the whole
 * process: whether its memory is the host's (host_memory) and the stream its
 * work is queued on. Call before comm_world_init; without it (or with the CPU
 * table) every buffer is host memory and NCCL is never chosen. */
void comm_set_ops(const struct dt_ops *ops);

/* The world, from RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / GROUP_RANK.
 * `store` is borrowed: it must outlive the world and every group made from it.
 * On failure *out is NULL and err holds one line. */
int comm_world_init(comm **out, comm_store *store, char *err, size_t errlen);

/* Same as comm_world_init with explicit values instead of the environment;
 * node_id names the node (ranks with equal node_id share memory); NULL = host name. */
int comm_world_init_with(comm **out, comm_store *store, int rank, int world_size,
                         const char *node_id, char *err, size_t errlen);

/* A communicator over `n` members of `parent`, given as parent ranks (rank i of
 * the new communicator is ranks[i]). Only the members call it, in the same order
 * relative to their other comm_group calls on the same parent and list. A caller
 * that is not in `ranks` gets COMM_EINVAL. Errors: *out NULL, one line in err. */
int comm_group(comm *parent, const int *ranks, int n, comm **out, char *err, size_t errlen);

/* Releases the communicator (shm names are already unlinked: that happens as soon
 * as every member has mapped the segment). Every request must have been waited
 * for. Destroy groups before the world they came from. */
void comm_destroy(comm *c);

int comm_rank(const comm *c);
int comm_size(const comm *c);
/* World rank of this communicator's rank r. */
int comm_world_rank(const comm *c, int r);
/* "self", "shm", "tcp" or "nccl". */
const char *comm_transport(const comm *c);
/* The queue the communicator's operations run on: its cudaStream_t with
 * NCCL, NULL on the CPU transports (their own threads). */
void *comm_stream(const comm *c);
/* The last error's line ("" if none). */
const char *comm_last_error(const comm *c);
/* Timeout of each later call, in seconds (> 0). */
void comm_set_timeout(comm *c, double seconds);
double comm_timeout(const comm *c);
/* Bytes this rank has sent to its peers on this communicator so far, every
 * operation counted (payload and framing): on tcp what was written to its
 * sockets, on shm what it wrote into the shared segment for the peers to
 * read; 0 on self. NCCL does not say (0). Read it before and after a call
 * (no operation in flight) for that call's traffic: an all_reduce of count
 * elements of e bytes sends 2(n-1)/n count e on tcp (ring, or for bf16 a
 * direct reduce_scatter then the ring's all_gather) and count e on shm (the
 * pieces the peers reduce, then the piece this rank reduced). bf16 moves bf16:
 * half the bytes of fp32. */
uint64_t comm_bytes_sent(const comm *c);

/* ---- collectives (blocking) ---- */

int comm_all_reduce(comm *c, const void *send, void *recv, size_t count, comm_dtype dt,
                    comm_op op);
/* send: count elements; recv: this rank's chunk (comm_chunk) of the reduction. */
int comm_reduce_scatter(comm *c, const void *send, void *recv, size_t count, comm_dtype dt,
                        comm_op op);
/* send: this rank's chunk (comm_chunk); recv: all count elements. */
int comm_all_gather(comm *c, const void *send, void *recv, size_t count, comm_dtype dt);
int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype dt, int root);
int comm_barrier(comm *c);
/* Point to point: messages between two ranks arrive in the order sent; the
 * receiver's count must equal the sender's (else COMM_EINVAL on the receiver). */
int comm_send(comm *c, const void *buf, size_t count, comm_dtype dt, int peer);
int comm_recv(comm *c, void *buf, size_t count, comm_dtype dt, int peer);

/* All to all with counts (MPI_Alltoallv; torch's all_to_all_single with split
 * sizes): send holds this rank's pieces for ranks 0..size-1 back to back,
 * send_counts[r] elements for rank r; recv gets the pieces of ranks
 * 0..size-1 back to back, recv_counts[r] elements from rank r, which must be
 * rank r's send_counts[this rank] (a mismatch is COMM_EINVAL, one line). Any
 * counts, zeros included; dt only sizes the elements: nothing is reduced,
 * the bytes arrive as sent. send and recv must not overlap; the two count
 * arrays, like the buffers, stay valid until the call returns or its
 * comm_wait. It is a collective (every member calls it, in the same order as
 * its other collectives on c). On the CPU transports its pieces travel as
 * c's point-to-point messages, so no send / recv may be in flight on c while
 * it runs (they could be matched with its pieces): give it a communicator of
 * its own, as the expert-parallel group is. NCCL runs it as one group of
 * ncclSend / ncclRecv. */
int comm_all_to_allv(comm *c, const void *send, const size_t *send_counts, void *recv,
                     const size_t *recv_counts, comm_dtype dt);
/* Equal pieces: count elements to and from every rank (send and recv hold
 * size x count). */
int comm_all_to_all(comm *c, const void *send, void *recv, size_t count, comm_dtype dt);

/* ---- asynchronous forms: same arguments, plus *req; comm_wait(req) completes
 * and frees the request and returns the operation's status. Every request must
 * be waited for. ---- */

int comm_all_reduce_async(comm *c, const void *send, void *recv, size_t count, comm_dtype dt,
                          comm_op op, comm_req **req);
int comm_reduce_scatter_async(comm *c, const void *send, void *recv, size_t count,
                              comm_dtype dt, comm_op op, comm_req **req);
int comm_all_gather_async(comm *c, const void *send, void *recv, size_t count, comm_dtype dt,
                          comm_req **req);
int comm_broadcast_async(comm *c, void *buf, size_t count, comm_dtype dt, int root,
                         comm_req **req);
int comm_barrier_async(comm *c, comm_req **req);
int comm_all_to_allv_async(comm *c, const void *send, const size_t *send_counts, void *recv,
                           const size_t *recv_counts, comm_dtype dt, comm_req **req);
int comm_send_async(comm *c, const void *buf, size_t count, comm_dtype dt, int peer,
                    comm_req **req);
int comm_recv_async(comm *c, void *buf, size_t count, comm_dtype dt, int peer,
                    comm_req **req);

/* Waits for the request (bounded by its communicator's timeout), frees it and
 * returns its status. NULL is COMM_OK (what a failed submission leaves). */
int comm_wait(comm_req *req);

/* ---- recorded into a CUDA graph (train.cuda_graphs) ----
 *
 * While the compute stream is being recorded (ops.h graph_begin), NCCL's
 * operations are recorded with it: started as usual, and their comm_wait
 * orders the compute stream after them (cudaStreamWaitEvent) instead of
 * waiting on the host, so every launch of the graph runs them again, in the
 * same order, on every rank (NCCL's rule: a recorded operation is recorded
 * on every member). While recording, every buffer must be device memory, and
 * a request must be waited for before the recording ends. The CPU transports
 * cannot be recorded (their collectives run on the host): a collective on
 * one of them while recording fails (COMM_EINVAL, one line), except a group
 * of one with device buffers (a device copy, recorded).
 *
 * comm_wait_device then bounds the launches: it waits until the device ran
 * everything queued so far on the compute stream (a launched graph and the
 * collectives recorded in it), at most c's timeout counted from this call,
 * watched like c's own operations: a dead peer or an NCCL error aborts NCCL
 * and is returned with one line naming `what` (comm_last_error), a timeout
 * likewise. COMM_OK at once on the CPU transports (their collectives finished
 * on the host). */
int comm_wait_device(comm *c, const char *what);

#endif
