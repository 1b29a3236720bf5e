/* attention_bench.c — the CPU attention core, fused against naive
 * (model.attention; issue 14), on the shapes of one block of a model.
 *
 * Times what a block's attention costs per micro-batch through each kind, as
 * runtime/model/local_layers.c calls it:
 *   naive  forward: attention_forward (probabilities [B, NH, T, T] kept);
 *          backward: attention_backward (a [B, NH, T, T] scratch)
 *   fused  forward: k, v packed (rows_copy) + attention_block_forward (one
 *          block, each row's log-sum-exp kept); backward: k, v packed, the
 *          dkv scratch zeroed, attention_block_backward, dkv added into dqkv
 * Best of --reps, the two kinds interleaved within each rep so load on a
 * shared machine hits them alike. Also prints how far fused's output and
 * gradient are from naive's (max |diff| / max |value|).
 *   build/bench/attention_bench --B 4 --T 256 --C 256 --NH 4 --causal 1 --reps 20 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ops.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *randf(size_t n, unsigned seed, float scale)
{
    float *p = malloc(n * sizeof(float));
    if (!p) exit(1);
    unsigned s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    return p;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

int main(int argc, char **argv)
{
    int B = 4, T = 256, C = 256, NH = 4, causal = 1, reps = 20, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--B")) B = v;
        else if (!strcmp(argv[i], "--T")) T = v;
        else if (!strcmp(argv[i], "--C")) C = v;
        else if (!strcmp(argv[i], "--NH")) NH = v;
        else if (!strcmp(argv[i], "--causal")) causal = v;
        else if (!strcmp(argv[i], "--reps")) reps = v;
        else if (!strcmp(argv[i], "--threads")) threads = v;
        else {
            fprintf(stderr, "attention_bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH || reps < 1) {
        fprintf(stderr, "attention_bench: bad shape B %d T %d C %d NH %d\n", B, T, C, NH);
        return 2;
    }
    const dt_ops *ops = &dt_ops_cpu;
    dt_ops_set_threads(threads);
    size_t N = (size_t)B * T, tt = (size_t)B * NH * T * T;
    float *qkv = randf(N * 3 * C, 1, 2.0f), *dout = randf(N * C, 2, 1.0f);
    float *out_n = calloc(N * C, sizeof(float)), *out_f = calloc(N * C, sizeof(float));
    float *att = calloc(tt, sizeof(float)), *scr = calloc(tt, sizeof(float));
    float *lse = calloc((size_t)B * NH * T, sizeof(float)), *kv = calloc(N * 4 * C, sizeof(float));
    float *dqkv_n = calloc(N * 3 * C, sizeof(float)), *dqkv_f = calloc(N * 3 * C, sizeof(float));
    if (!out_n || !out_f || !att || !scr || !lse || !kv || !dqkv_n || !dqkv_f) return 1;
    float *dkv = kv + N * 2 * C;
    double best[4] = {1e30, 1e30, 1e30, 1e30}; /* naive fwd, bwd; fused fwd, bwd */
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        ops->attention_forward(out_n, att, qkv, B, T, C, NH, NH, causal, DT_F32);
        double t1 = now();
        memset(dqkv_n, 0, N * 3 * C * sizeof(float));
        double t2 = now();
        ops->attention_backward(dqkv_n, scr, dout, qkv, att, B, T, C, NH, NH, causal, DT_F32);
        double t3 = now();
        ops->rows_copy(kv, 2 * C, qkv + C, 3 * C, (int)N, 2 * C, 0, DT_F32);
        ops->attention_block_forward(out_f, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NH, causal, 0, DT_F32, DT_F32);
        double t4 = now();
        memset(dqkv_f, 0, N * 3 * C * sizeof(float));
        double t5 = now();
        ops->rows_copy(kv, 2 * C, qkv + C, 3 * C, (int)N, 2 * C, 0, DT_F32);
        ops->zero(dkv, N * 2 * C * sizeof(float));
        ops->attention_block_backward(dqkv_f, dkv, dout, out_f, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NH, causal, 0, DT_F32);
        ops->rows_copy(dqkv_f + C, 3 * C, dkv, 2 * C, (int)N, 2 * C, 1, DT_F32);
        double t6 = now();
        double d[4] = {t1 - t0, t3 - t2, t4 - t3, t6 - t5};
        for (int k = 0; k < 4; k++) best[k] = fmin(best[k], d[k]);
    }
    printf("attention B %d T %d C %d NH %d %s, best of %d (ms): naive fwd %.3f bwd %.3f total %.3f | fused fwd %.3f "
           "bwd %.3f total %.3f | fused / naive %.3f\n",
           B, T, C, NH, causal ? "causal" : "full", reps, 1e3 * best[0], 1e3 * best[1], 1e3 * (best[0] + best[1]),
           1e3 * best[2], 1e3 * best[3], 1e3 * (best[2] + best[3]), (best[2] + best[3]) / (best[0] + best[1]));
    printf("fused vs naive: out %.2e, dqkv %.2e (max |diff| / max |value|)\n", rel_diff(out_f, out_n, N * C),
           rel_diff(dqkv_f, dqkv_n, N * 3 * C));
    free(qkv), free(dout), free(out_n), free(out_f), free(att), free(scr), free(lse), free(kv), free(dqkv_n),
        free(dqkv_f);
    return 0;
}
