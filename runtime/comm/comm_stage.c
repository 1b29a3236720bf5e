/* comm_stage.c — device buffers on the CPU transports (self, shm, tcp).
 *
 * Why here: with train.device cuda the strategies hand the comm layer device
 * pointers (gradients, parameter shards). Where NCCL cannot run — several
 * ranks on one GPU (NCCL <= 2.29 refuses them), no libnccl — the CPU transport
 * still can, if someone moves the bytes through host memory. Doing it once,
 * behind the API, keeps every strategy free of "is this on the device?".
 *
 * How: a pointer is device memory when cudaPointerGetAttributes says
 * cudaMemoryTypeDevice (asked only when a CUDA device is in use). Inputs are
 * copied to a host block before the collective, results back after it, on the
 * compute stream (the ops table's stream, comm_set_ops): the copy out waits for the kernels
 * that produced the data, the copy back is ordered before the kernels that
 * read it. Those waits are bounded because the compute stream never waits for
 * communication that has not finished (comm_nccl.c joins it only after a
 * request completed). Asynchronous forms copy in at submission and back in
 * comm_wait, so overlap is lost on this path: it is the correctness path for
 * one-GPU multi-rank runs and tests, not the fast one.
 *
 * A group of one ("self") with device buffers copies device to device (in
 * stream order, no host wait, while the step is recorded into a CUDA graph:
 * comm.h).
 *
 * The ops table (comm_set_ops) says where compute runs: its stream is the
 * compute queue that copies and device backends order themselves after. */
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "runtime/comm/comm_internal.h"

static const dt_ops *comm_ops;

void comm_set_ops(const dt_ops *ops)
{
    comm_ops = ops;
}

void *comm_compute_stream(void)
{
    return comm_ops && !comm_ops->host_memory && comm_ops->stream ? comm_ops->stream() : NULL;
}

#ifdef DTRUN_CUDA

#include <cuda_runtime_api.h>

struct comm_stage {
    comm *c;
    char *host;             /* the host block (inputs, then results) */
    void *dst;              /* device buffer the result goes back to, or NULL */
    const char *src;        /* the result inside `host` */
    size_t bytes;
};

int comm_dev_active(void)
{
    return comm_compute_stream() != NULL;
}

/* What CUDA says p is; a pointer it does not know is host memory to us. */
static enum cudaMemoryType mem_type(const void *p)
{
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError();
        return cudaMemoryTypeUnregistered;
    }
    return at.type;
}

int comm_dev_is_device(const void *p)
{
    if (!p || !comm_dev_active())
        return 0;
    return mem_type(p) == cudaMemoryTypeDevice;
}

int comm_dev_is_host(const void *p)
{
    if (!p)
        return 0;
    enum cudaMemoryType t = mem_type(p);
    return t == cudaMemoryTypeUnregistered || t == cudaMemoryTypeHost;
}

int comm_dev_capturing(void)
{
    cudaStream_t s = (cudaStream_t)comm_compute_stream();
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (!s)
        return 0;
    if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return st != cudaStreamCaptureStatusNone;
}

/* dst <- src (either side host or device), finished when it returns; while
 * the compute stream is recorded (comm.c lets only a group of one's device
 * buffers come here then) a device copy recorded in stream order. */
static int copy(comm *c, void *dst, const void *src, size_t bytes, const char *what)
{
    if (bytes == 0 || dst == src)
        return COMM_OK;
    cudaStream_t s = (cudaStream_t)comm_compute_stream();
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
    if (e == cudaSuccess && !comm_dev_capturing())
        e = cudaStreamSynchronize(s);
    if (e != cudaSuccess)
        return comm_fail(c, COMM_ESYS, "%s: staging %zu bytes %s: %s", c->name, bytes, what,
                         cudaGetErrorString(e));
    return COMM_OK;
}

/* A group of one: the result is the input (comm_self.c), moved on the device. */
static int self_coll(comm *c, const coll_args *a, size_t ns, size_t nr, size_t es)
{
    if (atomic_load(&c->status) != COMM_OK)
        return COMM_EBROKEN;
    if (a->kind == COLL_BROADCAST || a->kind == COLL_BARRIER || nr == 0)
        return COMM_OK;
    (void)ns;
    return copy(c, a->recv, a->send, nr * es, "in a group of one");
}

/* Hands the staging to the request the backend's start made (or finishes it
 * at once when there is none). */
static int attach(struct comm_stage *st, comm_req *r)
{
    if (!r)
        return comm_stage_finish(st, COMM_OK);
    r->stage = st;
    return COMM_OK;
}

int comm_stage_coll(comm *c, const coll_args *a, int blocking, comm_req **req)
{
    size_t es = comm_dtype_size(a->dt), ns, nr;
    comm_coll_extent(c, a, &ns, &nr);
    if (c->size == 1)  /* a host backend for a group of one is self */
        return self_coll(c, a, ns, nr, es);  /* *req stays NULL: comm_wait(NULL) is OK */
    int sdev = ns > 0 && comm_dev_is_device(a->send);
    int rdev = nr > 0 && comm_dev_is_device(a->recv);
    /* separate host blocks for input and result: the host collective then
     * runs out of place, which every kind allows */
    size_t sb = sdev ? ns * es : 0, rb = rdev ? nr * es : 0;
    char *host = malloc(sb + rb > 0 ? sb + rb : 1);
    struct comm_stage *st = malloc(sizeof *st);
    if (!host || !st) {
        free(host);
        free(st);
        return comm_fail(c, COMM_ESYS, "%s: out of memory staging %zu bytes", c->name, sb + rb);
    }
    coll_args h = *a;
    if (sdev)
        h.send = host;
    if (rdev)
        h.recv = host + sb;
    int rc = COMM_OK;
    if (sdev)
        rc = copy(c, host, a->send, sb, "to the host");
    /* a broadcast's root sends what its buffer holds */
    if (rc == COMM_OK && rdev && a->kind == COLL_BROADCAST && c->rank == a->root)
        rc = copy(c, host + sb, a->recv, rb, "to the host");
    if (rc == COMM_OK)
        rc = c->be->coll_start(c, &h, blocking, req);
    if (rc == COMM_OK) {
        *st = (struct comm_stage){c, host, rdev ? a->recv : NULL, host + sb, rb};
        return attach(st, *req);
    }
    free(st);
    free(host);
    return rc;
}

int comm_stage_p2p(comm *c, int is_send, void *buf, size_t count, comm_dtype dt, int peer,
                   int blocking, comm_req **req)
{
    size_t bytes = count * comm_dtype_size(dt);
    char *host = malloc(bytes ? bytes : 1);
    struct comm_stage *st = malloc(sizeof *st);
    if (!host || !st) {
        free(host);
        free(st);
        return comm_fail(c, COMM_ESYS, "%s: out of memory staging %zu bytes", c->name, bytes);
    }
    int rc = is_send ? copy(c, host, buf, bytes, "to the host") : COMM_OK;
    if (rc == COMM_OK)
        rc = c->be->p2p_start(c, is_send, host, count, dt, peer, blocking, req);
    if (rc == COMM_OK) {
        *st = (struct comm_stage){c, host, is_send ? NULL : buf, host, bytes};
        return attach(st, *req);
    }
    free(st);
    free(host);
    return rc;
}

int comm_stage_finish(struct comm_stage *st, int status)
{
    if (status == COMM_OK && st->dst)
        status = copy(st->c, st->dst, st->src, st->bytes, "to the device");
    free(st->host);
    free(st);
    return status;
}

#else /* no CUDA backend: no device memory, nothing is ever staged */

int comm_dev_active(void) { return 0; }
int comm_dev_capturing(void) { return 0; }
int comm_dev_is_device(const void *p) { return 0; }
int comm_dev_is_host(const void *p) { return p != NULL; }

int comm_stage_coll(comm *c, const coll_args *a, int blocking, comm_req **req)
{
    return comm_fail(c, COMM_EINVAL, "%s: device buffers in a build without CUDA", c->name);
}

int comm_stage_p2p(comm *c, int is_send, void *buf, size_t count, comm_dtype dt, int peer,
                   int blocking, comm_req **req)
{
    return comm_fail(c, COMM_EINVAL, "%s: device buffers in a build without CUDA", c->name);
}

int comm_stage_finish(struct comm_stage *st, int status) { return status; }

#endif
