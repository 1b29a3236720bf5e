/* comm_nccl.h — the NCCL backend behind comm.h, for GPU buffers. Private to
 * runtime/comm: an entry of the backend table (comm_internal.h) that the world
 * may pick; callers only see comm_transport() == "nccl".
 *
 * When it is chosen (comm.c, comm_world_init): DTRUN_COMM_BACKEND=nccl forces
 * it for every communicator (groups of one included, so a one-rank test runs
 * real NCCL calls); =cpu forbids it; auto (the default) takes it for a world
 * of more than one rank when every rank has a CUDA device in use (the worker
 * set up the CUDA ops: train.device resolved to cuda) and libnccl loads, and
 * no two ranks of a node share a GPU. NCCL (<= 2.29) refuses two ranks on one
 * GPU, so several ranks on one GPU keep the CPU transport (shm / tcp) and the
 * comm layer stages their device buffers through host memory (comm_stage.c).
 * Groups of a world on NCCL use NCCL too (auto: groups of one stay "self").
 *
 * Buffers may be device or host pointers (host ones are staged through device
 * memory: the engine's small host exchanges, e.g. the loss, still work).
 *
 * How it works:
 *  - libnccl is dlopen'ed (comm_nccl_lib.c): 218 MB that the launcher, the
 *    dry-run and CPU runs never need, and a build that runs where NCCL is
 *    missing (it then answers "no NCCL" and auto falls back to CPU transport).
 *  - Each communicator gets its own ncclComm_t from ncclCommInitRankConfig with
 *    config.blocking = 0, its unique id through the bootstrap store (rank 0 of
 *    the group makes it, the others wait for it with the timeout). Not
 *    ncclCommSplit: comm_group is called by the members only (the tied
 *    embedding's pair, HSDP's groups), and a split needs every parent rank.
 *  - Collectives run on the communicator's own stream (non-blocking, so the
 *    legacy default stream never waits for it), after an event recorded on
 *    the compute stream (the ops table's stream, comm_set_ops), in issue order; a request's
 *    event marks its end, and the compute stream waits for that event when the
 *    request is waited for.
 *  - Send / recv: one two-rank NCCL communicator (and stream) per (peer,
 *    direction), so messages each way between two ranks keep their order and
 *    never queue behind the other direction or another peer (a pipeline sends
 *    activations one way and gradients the other; one NCCL communicator for
 *    all of them serialises on the device and deadlocks 1F1B). A pair's two
 *    lanes are made at its first exchange, a rendezvous of the two ranks
 *    (bounded by the timeout): ranks must first meet pairwise in an order
 *    without cycles. Pipelines (stage k first meets k - 1, then k + 1) and
 *    gathers to one rank do; a ring whose every rank first sends to its right
 *    neighbour does not, and fails with a timeout naming the send.
 *  - reduce_scatter / all_gather with a count the group size does not divide
 *    (comm.h's ceil chunks, the last ones short): grouped ncclReduce /
 *    ncclBroadcast per chunk, no padding copies.
 *  - Errors are answers: every wait polls cudaEventQuery and
 *    ncclCommGetAsyncError until the request's deadline (issue time + the
 *    communicator's timeout). A watchdog thread does the same for requests
 *    nobody waits for yet, because a device-wide synchronisation elsewhere
 *    (cudaFree) would otherwise hang on a stuck collective. On a timeout or an
 *    NCCL error every NCCL communicator of the process is aborted
 *    (ncclCommAbort: the kernels return), the failing one records one line
 *    ("all_reduce #12 of group[0,2] (rank 2's collective #31): nccl: timed out after 60.0 s ...") and the
 *    others "aborted: ..." with it; all are broken from then on, as comm.h says.
 *  - A count mismatch between sender and receiver cannot be seen by NCCL: it
 *    becomes a timeout (or garbage), not COMM_EINVAL as on the CPU transport. */
#ifndef DTRUN_COMM_NCCL_H
#define DTRUN_COMM_NCCL_H

/* The backend is one entry of comm_internal.h's table, comm_backend_nccl
 * (memory COMM_MEM_DEVICE, stream: its collectives' CUDA stream); comm.c
 * picks it through the world's choice and calls only its entries. */
#include "runtime/comm/comm_internal.h"

#endif
