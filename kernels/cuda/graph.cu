/* graph.cu — ops recorded once and replayed as one CUDA graph (ops.h
 * graph_begin, graph_end, graph_launch, graph_destroy; train.cuda_graphs).
 *
 * Recording is stream capture of the backend's one stream: every op is
 * queued there (common.cuh), so capturing it records the ops in issue order
 * as a chain of nodes, cuBLASLt's GEMMs included (they use the fixed
 * workspace set up in ops_cuda.cu; cuBLAS's is the same buffer, so neither
 * allocates while recording).
 *
 * Which stream and which mode. The stream is a blocking one (created with
 * default flags, common.cuh says why) and not the legacy default stream,
 * which alone cannot be captured; what a blocking stream adds is an implicit
 * ordering with work on the legacy stream, and anything queued there while
 * we record would have to wait for our capture: CUDA answers that with an
 * error (cudaErrorStreamCaptureImplicit) rather than a wrong graph, and
 * nothing in a recorded step touches the legacy stream. So no second,
 * non-blocking stream is needed. Mode: cudaStreamCaptureModeThreadLocal.
 * The backend has one host thread (common.cuh, Threads); in this mode a
 * call on that thread that is unsafe while recording — cudaMalloc (the
 * scratch growing), a synchronous cudaMemcpy, a stream synchronisation
 * (to_host, sumsq) — fails at the call, which DTC_CHECK turns into one line
 * naming it, instead of running once at record time and missing from every
 * replay as cudaStreamCaptureModeRelaxed would let it. Global would also
 * police other threads' calls (a profiler's, NCCL's proxy thread, the comm
 * layer's NCCL watchdog polling its events), none of which touch what we
 * record: with several ranks the recorded NCCL operations are queued by this
 * thread, and the comm layer keeps them away from its watchdog (comm.h).
 *
 * Buffers lent to the recorded ops. A graph holds the addresses its kernels
 * were given, so every buffer it touches must stay where it was: the model's
 * and optimizer's are fixed for the run; the backend's scratch (dtc_scratch)
 * and bf16 operand buffer (matmul.cu) move when they grow. They cannot grow
 * while recording (dtc_scratch and matmul.cu's operands16 refuse: both
 * stop the process with one line), and the caller records only a sequence
 * of ops that already ran once as issued, which sized them. If they grew
 * later (an evaluation with larger shapes), graph_launch notices the new
 * address and answers -1: the caller records again. */
#include <cstdlib>

#include "kernels/cuda/common.cuh"

struct dtc_graph {
    cudaGraphExec_t exec;
    void *scratch, *operands16; /* as they were when recorded */
};

void cuda_graph_begin(void) {
    DTC_CHECK(cudaStreamBeginCapture(dtc.stream, cudaStreamCaptureModeThreadLocal));
    dtc.capturing = 1;
}

void *cuda_graph_end(void) {
    cudaGraph_t g = nullptr;
    dtc.capturing = 0;
    DTC_CHECK(cudaStreamEndCapture(dtc.stream, &g));
    dtc_graph *h = (dtc_graph *)malloc(sizeof *h);
    if (!h) dtc_fatal(__FILE__, __LINE__, "malloc", "out of host memory");
    DTC_CHECK(cudaGraphInstantiate(&h->exec, g, 0));
    DTC_CHECK(cudaGraphDestroy(g)); /* the executable graph keeps what it needs */
    h->scratch = dtc.scratch;
    h->operands16 = dtc.operands16;
    return h;
}

int cuda_graph_launch(void *graph) {
    dtc_graph *h = (dtc_graph *)graph;
    if ((h->scratch && h->scratch != dtc.scratch) || (h->operands16 && h->operands16 != dtc.operands16))
        return -1;
    DTC_CHECK(cudaGraphLaunch(h->exec, dtc.stream));
    return 0;
}

void cuda_graph_destroy(void *graph) {
    dtc_graph *h = (dtc_graph *)graph;
    if (!h) return;
    /* a launch of it may still be queued: let it finish first */
    DTC_CHECK(cudaStreamSynchronize(dtc.stream));
    DTC_CHECK(cudaGraphExecDestroy(h->exec));
    free(h);
}
