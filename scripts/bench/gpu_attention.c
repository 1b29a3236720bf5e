/* gpu_attention.c — micro-benchmark of the blockwise attention kernels
 * (ops.h attention_block_*, kernels/cuda/attention_block*.cu) on one GPU:
 * forward and backward at GPT-2 124M's shapes (B 8, T 1024, NH 12, hs 64,
 * causal), called as the model calls them (one block: Tq = Tk = T, shift 0),
 * in both arithmetic modes:
 *   fp32   CUDA cores, fp32 throughout (the CPU twin's arithmetic)
 *   bf16   tensor cores, bf16 operands and fp32 accumulation
 *          (dt_ops_cuda_set_bf16(1); q, k, v rounded to bf16 first, stored
 *          as fp32)
 *   bf16_act  the same with the activations stored as bf16 (t = DT_BF16:
 *          q, kv and out bf16, as a mixed-precision model keeps them): half
 *          the bytes read and written, no narrowing on load
 * With --kv-heads NKV < NH, grouped-query attention (Llama 3 8B: --heads 32
 * --kv-heads 8 --hs 128): the same FLOPs, k and v NKV heads wide.
 * And, for reference, the full attention (attention_forward/_backward: cuBLAS
 * GEMMs in fp32 with the [B, NH, T, T] probabilities in memory; full_bf16_act:
 * its bf16-activation path, attention.cu).
 *
 *   gpu_attention [--batch B] [--seq T] [--heads NH] [--kv-heads NKV] [--hs HS] [--full 0|1]
 *                 [--iters N] [--warmup W]
 *
 * Prints one JSON line: per mode the median forward and backward time (ms,
 * each call timed alone between two stream synchronisations) and TFLOP/s.
 * FLOPs are the useful ones as FlashAttention counts them: forward
 * 4 B NH T^2 hs (Q K^T and P V), halved when causal; backward 2.5 times the
 * forward (five products). The kernels' backward computes seven (the dQ pass
 * recomputes S and dP instead of adding dQ with atomics), which the figure
 * does not count. Exit 1: bad option; 2: no CUDA device; 3: out of memory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/ops_cuda.h"
#include "kernels/ops.h"

#ifdef DTRUN_CUDA
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void) {
    fprintf(stderr, "usage: gpu_attention [--batch B] [--seq T] [--heads NH] [--kv-heads NKV] [--hs HS] [--full 0|1] "
                    "[--iters N] [--warmup W]\n");
    exit(1);
}

static float *dev_random(const dt_ops *ops, size_t n, uint64_t seed) {
    float *h = malloc(n * sizeof(float)), *d = ops->alloc(n * sizeof(float));
    if (!h || !d) {
        fprintf(stderr, "gpu_attention: out of memory (%zu floats)\n", n);
        exit(3);
    }
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) { /* xorshift64*, uniform in [-1, 1) */
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        h[i] = (float)(((s * 0x2545F4914F6CDD1Dull) >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
    }
    ops->from_host(d, h, n * sizeof(float));
    free(h);
    return d;
}

typedef struct {
    int B, T, NH, NKV, C;
    const dt_ops *ops;
    dt_dtype t; /* the activations' type: qkv, kv, out, att */
    void *qkv, *kv, *out, *att;
    float *lse, *dout, *dqkv, *dkv, *scratch;
} bench;

enum { PASS_FWD, PASS_BWD };

static void run_block(const bench *b, int pass) {
    const dt_ops *ops = b->ops;
    if (pass == PASS_FWD)
        ops->attention_block_forward(b->out, b->lse, b->qkv, b->kv, NULL, NULL, b->B, b->T, b->T, b->T, b->C, b->NH, b->NKV, 1, 0, b->t,
                                     b->t);
    else
        ops->attention_block_backward(b->dqkv, b->dkv, b->dout, b->out, b->lse, b->qkv, b->kv, NULL, NULL, b->B, b->T, b->T,
                                      b->T, b->C, b->NH, b->NKV, 1, 0, b->t);
}

static void run_full(const bench *b, int pass) {
    const dt_ops *ops = b->ops;
    if (pass == PASS_FWD)
        ops->attention_forward(b->out, b->att, b->qkv, b->B, b->T, b->C, b->NH, b->NKV, 1, b->t);
    else
        ops->attention_backward(b->dqkv, b->scratch, b->dout, b->qkv, b->att, b->B, b->T, b->C, b->NH, b->NKV, 1, b->t);
}

/* Median seconds of one call of `pass`. */
static double time_pass(const bench *b, void (*fn)(const bench *, int), int pass, int iters, int warmup) {
    double *t = malloc((size_t)iters * sizeof(double));
    for (int k = 0; k < warmup + iters; k++) {
        dt_ops_cuda_synchronize();
        double t0 = now_s();
        fn(b, pass);
        dt_ops_cuda_synchronize();
        if (k >= warmup) t[k - warmup] = now_s() - t0;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    double med = t[iters / 2];
    free(t);
    return med;
}

static void print_mode(const char *name, double fwd, double bwd, double ffwd, double fbwd, int last) {
    printf("\"%s\":{\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,\"fwd_tflops\":%.2f,\"bwd_tflops\":%.2f,\"tflops\":%.2f}%s", name,
           fwd * 1e3, bwd * 1e3, ffwd / fwd / 1e12, fbwd / bwd / 1e12, (ffwd + fbwd) / (fwd + bwd) / 1e12,
           last ? "" : ",");
}

int main(int argc, char **argv) {
    int B = 8, T = 1024, NH = 12, NKV = 0, hs = 64, iters = 20, warmup = 3, full = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--heads") && i + 1 < argc) NH = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv-heads") && i + 1 < argc) NKV = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hs") && i + 1 < argc) hs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--full") && i + 1 < argc) full = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else usage();
    }
    if (NKV == 0) NKV = NH;
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || NH % NKV || hs <= 0 || iters <= 0 || warmup < 0) usage();
    const dt_ops *ops = dt_ops_cuda();
    if (!ops) {
        fprintf(stderr, "gpu_attention: no CUDA device (or the CUDA backend is not built)\n");
        return 2;
    }
    int C = NH * hs, W = dt_qkv_cols(C, NH, NKV), C2 = dt_kv_cols(C, NH, NKV);
    size_t N = (size_t)B * T;
    bench b = {.B = B, .T = T, .NH = NH, .NKV = NKV, .C = C, .ops = ops, .t = DT_F32};
    b.qkv = dev_random(ops, N * W, 1);
    b.dout = dev_random(ops, N * C, 2);
    b.kv = ops->alloc(N * C2 * sizeof(float));
    b.out = ops->alloc(N * C * sizeof(float));
    b.lse = ops->alloc((size_t)B * NH * T * sizeof(float));
    b.dqkv = ops->alloc(N * W * sizeof(float));
    b.dkv = ops->alloc(N * C2 * sizeof(float));
    if (!b.kv || !b.out || !b.lse || !b.dqkv || !b.dkv) {
        fprintf(stderr, "gpu_attention: out of device memory at B=%d T=%d C=%d\n", B, T, C);
        return 3;
    }
    /* bf16 values, so both modes see the same inputs (the bf16 model stores
     * qkv rounded), then k and v packed as the contract wants them */
    ops->round_bf16(b.qkv, N * W);
    ops->rows_copy(b.kv, C2, (float *)b.qkv + C, W, (int)N, C2, 0, DT_F32);
    /* the same values stored as bf16 (exact), for the bf16_act modes */
    bench h = b;
    h.t = DT_BF16;
    h.qkv = ops->alloc(N * W * sizeof(uint16_t));
    h.kv = ops->alloc(N * C2 * sizeof(uint16_t));
    h.out = ops->alloc(N * C * sizeof(uint16_t));
    if (!h.qkv || !h.kv || !h.out) {
        fprintf(stderr, "gpu_attention: out of device memory at B=%d T=%d C=%d\n", B, T, C);
        return 3;
    }
    ops->to_bf16(h.qkv, b.qkv, N * W);
    ops->to_bf16(h.kv, b.kv, N * C2);

    double causal_frac = 0.5;
    double ffwd = 4.0 * B * NH * (double)T * T * hs * causal_frac, fbwd = 2.5 * ffwd;
    double t[5][2] = {{0}};
    dt_ops_cuda_set_tf32(0);
    for (int mode = 0; mode < 2; mode++) {
        dt_ops_cuda_set_bf16(mode);
        t[mode][0] = time_pass(&b, run_block, PASS_FWD, iters, warmup);
        t[mode][1] = time_pass(&b, run_block, PASS_BWD, iters, warmup);
    }
    /* bf16_act: bf16 products, as a mixed-precision run has them */
    t[2][0] = time_pass(&h, run_block, PASS_FWD, iters, warmup);
    t[2][1] = time_pass(&h, run_block, PASS_BWD, iters, warmup);
    dt_ops_cuda_set_bf16(0);
    if (full) {
        size_t natt = (size_t)B * NH * T * T;
        b.att = ops->alloc(natt * sizeof(float));
        b.scratch = ops->alloc(natt * sizeof(float));
        if (b.att && b.scratch) {
            t[3][0] = time_pass(&b, run_full, PASS_FWD, iters, warmup);
            t[3][1] = time_pass(&b, run_full, PASS_BWD, iters, warmup);
            h.att = b.att; /* bf16: half of it */
            h.scratch = b.scratch;
            dt_ops_cuda_set_bf16(1);
            t[4][0] = time_pass(&h, run_full, PASS_FWD, iters, warmup);
            t[4][1] = time_pass(&h, run_full, PASS_BWD, iters, warmup);
            dt_ops_cuda_set_bf16(0);
        } else {
            full = 0; /* the T x T probabilities do not fit: say so by leaving the mode out */
        }
    }
    printf("{\"bench\":\"attention_block\",\"device\":\"%s\",\"B\":%d,\"T\":%d,\"NH\":%d,\"NKV\":%d,\"hs\":%d,"
           "\"causal\":1,\"fwd_gflop\":%.3f,\"bwd_gflop\":%.3f,",
           dt_ops_cuda_device_name(), B, T, NH, NKV, hs, ffwd / 1e9, fbwd / 1e9);
    print_mode("fp32", t[0][0], t[0][1], ffwd, fbwd, 0);
    print_mode("bf16", t[1][0], t[1][1], ffwd, fbwd, 0);
    print_mode("bf16_act", t[2][0], t[2][1], ffwd, fbwd, !full);
    if (full) {
        print_mode("full_fp32", t[3][0], t[3][1], ffwd, fbwd, 0);
        print_mode("full_bf16_act", t[4][0], t[4][1], ffwd, fbwd, 1);
    }
    printf("}\n");
    if (b.att) ops->free(b.att);
    if (b.scratch) ops->free(b.scratch);
    ops->free(h.qkv); ops->free(h.kv); ops->free(h.out);
    ops->free(b.qkv); ops->free(b.dout); ops->free(b.kv); ops->free(b.out); ops->free(b.lse);
    ops->free(b.dqkv); ops->free(b.dkv);
    return 0;
}
#else
int main(void) {
    fprintf(stderr, "gpu_attention: built without the CUDA backend (needs nvcc and NCCL, CUDA != 0)\n");
    return 2;
}
#endif
