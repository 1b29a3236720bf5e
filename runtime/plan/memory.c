/* memory.c — per pipeline stage: what sizes.h says the worker allocates, plus the
 * fixed overheads a GPU process pays, against the memory one rank may use. */
#include <math.h>
#include <stdio.h>

#include "runtime/plan/estimate.h"
#include "runtime/plan/format.h"

/* On a GPU a rank has its device; on the CPU backend the ranks of a host share
 * its memory. */
static double rank_device_memory(const plan_estimate *e)
{
    if (e->hw.gpu) return e->hw.memory;
    return e->hw.memory / e->ranks_per_node;
}

/* train.offload on a GPU: the node's ranks' host pools (each as large as the
 * fullest stage's, to be safe) against the node's host memory. On the CPU
 * backend the host pool is the same memory as the rest: plan_memory adds it
 * to each stage's total instead. */
static void check_host_memory(plan_estimate *e, double host_max)
{
    if (!e->hw.gpu || host_max <= 0) return;
    double need = host_max * e->ranks_per_node;
    if (e->hw.host_memory > 0 && need <= e->hw.host_memory) return;
    e->fits = 0;
    char a[FMT_LEN], b[FMT_LEN], c[FMT_LEN];
    if (e->hw.host_memory > 0)
        plan_warn(e, "host memory: train.offload keeps %s per node in host memory (%d ranks x %s), the node has %s",
                  fmt_bytes(a, need), e->ranks_per_node, fmt_bytes(b, host_max), fmt_bytes(c, e->hw.host_memory));
    else
        plan_warn(e, "host memory: train.offload keeps %s per node in host memory and the hardware profile does "
                     "not say how much a node has (host_memory_mib)",
                  fmt_bytes(a, need));
}

/* Under bf16 mixed precision the CUDA backend narrows a GEMM's fp32
 * operands into one buffer it keeps (kernels/cuda/matmul.cu, operands16),
 * at its largest use. The activations and the weight matrices are bf16
 * already and go to cuBLASLt as they are (ops.h): what is narrowed is the
 * output gradient of every backward GEMM ([rows, OC], once for both of a
 * layer's products) and, for the patch embedding (an fp32 op), its weight
 * and its im2col matrix (the first padded to 256 bytes). A column layer's
 * bf16 output with a bias cuBLASLt will not add in its epilogue borrows
 * room of its input's size for its fp32 rows (matmul.cu forward_rows_bf16).
 * Outside the runtime's accounting, like the cuBLAS workspace, so it is
 * counted with the fixed bytes. Rows: a micro-batch's tokens on this rank
 * (whole under sequence parallelism: the column layers gather them); the
 * GPT head's GEMMs take one chunk of rows. */
static double bf16_operands_bytes(const plan_estimate *e)
{
    const job_model *m = &e->job.model;
    const job_parallel *par = &e->job.parallel;
    /* a Llama's MLP up projection is its packed gate|up GEMM (2 d_ff) */
    double t = par->tp, C = m->d_model, F = (m->kind == MODEL_LLAMA ? 2.0 : 1.0) * m->d_ff / t, C3 = 3.0 * C / t,
           Cl = C / t;
    double N = (double)e->job.train.micro_batch * model_seq_len(m) / par->cp;
    /* elements narrowed (or borrowed) by one GEMM call, the largest of each kind */
    double most = fmax(N * C, fmax(N * C3, fmax(N * Cl, N * F))); /* output gradients; a forward's borrowed rows */
    if (job_model_is_lm(m)) {
        double R = model_head_chunk_rows(m), V = ceil((double)m->vocab_size / t);
        if (R > N) R = N;
        most = fmax(most, R * V); /* a chunk of dlogits */
    } else {
        double P = (double)m->channels * m->patch_size * m->patch_size, np = model_seq_len(m) - 1.0;
        double B = e->job.train.micro_batch, pad = 256.0 / 2;
        most = fmax(most, ceil(Cl * P / pad) * pad + B * np * P); /* the patch embedding's pair */
        most = fmax(most, B * (double)m->n_classes);              /* the classifier's dlogits */
    }
    return 2.0 * most;
}

/* The CUDA backend's one growable scratch (kernels/cuda dtc_scratch), kept
 * at its largest use: the patch embedding's im2col matrix (ViT, fp32) or
 * the fused attention's backward row statistic D ([B, heads / tp, seq]
 * fp32); the small reductions' partial sums never exceed these. */
static double cuda_scratch_bytes(const plan_estimate *e)
{
    const job_model *m = &e->job.model;
    double B = e->job.train.micro_batch, seq = model_seq_len(m);
    double d = 4.0 * B * ((double)m->n_head / e->job.parallel.tp) * seq / e->job.parallel.cp;
    if (job_model_is_lm(m)) return d;
    double patches = 4.0 * B * (seq - 1.0) * (double)m->channels * m->patch_size * m->patch_size;
    return patches > d ? patches : d;
}

/* The CPU backend under bf16: its kernels compute in fp32, so they widen
 * each bf16 operand into an fp32 buffer they keep, one per operand slot at
 * its largest use (kernels/cpu/act.c); a device would read bf16 directly.
 * Slot 0 is an op's result (or a backward's bf16 input), slot 1 its input,
 * slot 2 a third operand, slot 3 a matmul's weight matrix (bf16 under
 * mixed precision too): the largest of each over the ops a rank runs. N:
 * a micro-batch's tokens on this rank (whole under sequence parallelism, as
 * the layers gather them). */
static double cpu_bf16_staging_bytes(const plan_estimate *e)
{
    const job_model *m = &e->job.model;
    const job_parallel *par = &e->job.parallel;
    /* a Llama's MLP up projection is its packed gate|up GEMM (2 d_ff) */
    double t = par->tp, C = m->d_model, F = (m->kind == MODEL_LLAMA ? 2.0 : 1.0) * m->d_ff / t, C3 = 3.0 * C / t,
           Cl = C / t;
    double T = (double)model_seq_len(m) / par->cp, B = e->job.train.micro_batch, N = B * T;
    int naive = m->attention == ATTN_NAIVE && par->cp == 1;
    double probs = naive ? B * ((double)m->n_head / t) * T * T : 0;
    double big = fmax(N * C, fmax(N * C3, N * F));
    double slot0 = big, slot1 = fmax(big, probs), slot2 = fmax(N * C, naive ? N * C3 : 2.0 * N * Cl);
    /* slot 3: a matmul's weight matrix, the largest (the GPT head's wte) */
    double slot3 = fmax(C * C3, C * F);
    if (job_model_is_lm(m)) slot3 = fmax(slot3, C * ceil((double)m->vocab_size / t));
    else slot3 = fmax(slot3, C * (double)m->n_classes);
    return 4.0 * (slot0 + slot1 + slot2 + slot3);
}

void plan_memory(plan_estimate *e)
{
    e->fits = 1;
    e->max_total = 0;
    double device = rank_device_memory(e), host_max = 0;
    for (int p = 0; p < e->n_stages; p++) {
        plan_stage *st = &e->stage[p];
        st->pp_rank = p;
        st->tp_rank = sizes_worst_tp_rank(e->sizes, p);
        sizes_rank_memory(e->sizes, (sizes_at){0, p, st->tp_rank}, &st->mem);
        st->fixed = e->hw.gpu ? hw_fixed_overhead(&e->hw, e->world) : 0;
        if (e->hw.gpu) st->fixed += cuda_scratch_bytes(e);
        if (e->hw.gpu && e->job.train.precision == PREC_BF16) st->fixed += bf16_operands_bytes(e);
        if (!e->hw.gpu && e->job.train.precision == PREC_BF16) st->fixed += cpu_bf16_staging_bytes(e);
        st->total = (double)st->mem.total + st->fixed + (e->hw.gpu ? 0 : (double)st->mem.host);
        if ((double)st->mem.host > host_max) host_max = (double)st->mem.host;
        st->device = device;
        st->oom = st->total > device;
        if (st->total > e->max_total) e->max_total = st->total;
        if (st->oom) {
            e->fits = 0;
            char need[FMT_LEN], have[FMT_LEN], state[FMT_LEN], acts[FMT_LEN];
            plan_warn(e, "OOM on pipeline stage %d: %s needed, %s on the device (%s %s, activations %s)", p,
                      fmt_bytes(need, st->total), fmt_bytes(have, device),
                      e->job.parallel.mode == SHARD_NONE ? "model state" : "sharded state",
                      fmt_bytes(state, (double)(st->mem.bytes[SIZES_PARAMS] + st->mem.bytes[SIZES_MASTER] +
                                                st->mem.bytes[SIZES_GRADS] + st->mem.bytes[SIZES_OPTIM])),
                      fmt_bytes(acts, (double)(st->mem.bytes[SIZES_ACTS] + st->mem.bytes[SIZES_LOGITS])));
        }
    }
    check_host_memory(e, host_max);
    /* what the estimate cannot count (allocator fragmentation, a library's own
     * buffers) needs room too: --plan proposes only layouts that leave it */
    e->headroom = hw_headroom(&e->hw, device);
    e->fits_headroom = e->fits && e->max_total <= device - e->headroom;
    if (e->fits && !e->fits_headroom) {
        char need[FMT_LEN], left[FMT_LEN], room[FMT_LEN];
        plan_warn(e, "headroom: the fullest stage needs %s and leaves %s of the device free, less than the %s "
                     "headroom (--plan would not propose this layout; --headroom to change)",
                  fmt_bytes(need, e->max_total), fmt_bytes(left, device - e->max_total), fmt_bytes(room, e->headroom));
    }
}
