/* test_kernels.c — the CPU kernels against finite differences and naive
 * references, plus the ops.h contracts (accumulating backward, vocab-parallel
 * embedding and cross-entropy, empty inputs) and a micro-benchmark.
 *
 * Gradient checks: every backward output is compared with central differences
 * of the scalar objective L = sum(out * R) (R fixed random), evaluated with a
 * double accumulation over the fp32 forward. The step is eps = 1e-3; fp32
 * rounding of the forward then limits the difference quotient to ~1e-4
 * absolute, so errors are relative with an absolute floor:
 *     err = |analytic - numeric| / max(|analytic|, |numeric|, FD_FLOOR)
 * and must stay below FD_TOL. Forward results are compared with double-
 * precision triple loops the same way (floor REF_FLOOR, tolerance REF_TOL). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ops.h"
#include "test/unit/check.h"

#define FD_EPS 1e-3f
#define FD_FLOOR 1e-1
#define FD_TOL 1e-2
#define REF_FLOOR 1e-2
#define REF_TOL 1e-4
/* GEMM outputs are sums of IC unit-sized products: their fp32 rounding error
 * scales with the terms, not with the (possibly cancelled) result, so the
 * floor is the terms' size. */
#define GEMM_FLOOR 1.0

static const dt_ops *ops = &dt_ops_cpu;


/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void) { /* uniform in [-1, 1), xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (float)((r >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

static float *rand_buf(size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

static float *zero_buf(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static double dot_r(const float *out, const float *R, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)out[i] * R[i];
    return s;
}

static double rel_err(double a, double b, double floor) {
    double m = fmax(fmax(fabs(a), fabs(b)), floor);
    return fabs(a - b) / m;
}

static double max_rel_err_f(const float *a, const float *b, size_t n, double floor) {
    double w = 0.0;
    for (size_t i = 0; i < n; i++) w = fmax(w, rel_err(a[i], b[i], floor));
    return w;
}

static double max_rel_err_d(const float *a, const double *ref, size_t n, double floor) {
    double w = 0.0;
    for (size_t i = 0; i < n; i++) w = fmax(w, rel_err(a[i], ref[i], floor));
    return w;
}

typedef double (*objective_fn)(void *ctx);

/* Max relative error between the analytic gradient g[n] and central
 * differences of f with respect to x[n]. The step actually taken is the
 * difference of the two representable fp32 values, not 2*eps. */
static double fd_check(objective_fn f, void *ctx, float *x, const float *g, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        float saved = x[i];
        float hi = saved + FD_EPS, lo = saved - FD_EPS;
        x[i] = hi;
        double lp = f(ctx);
        x[i] = lo;
        double lm = f(ctx);
        x[i] = saved;
        double numeric = (lp - lm) / ((double)hi - (double)lo);
        worst = fmax(worst, rel_err(g[i], numeric, FD_FLOOR));
    }
    return worst;
}

/* The accumulate contract: a second backward call adds the same amount again. */
static double accumulate_err(const float *once, const float *twice, size_t n) {
    double scale = 0.0, w = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(once[i]));
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs(twice[i] - 2.0 * once[i]));
    return scale > 0.0 ? w / scale : w;
}
#define ACC_TOL 1e-5

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- matmul */

static void ref_matmul(double *out, const float *inp, const float *w, const float *bias,
                       int N, int IC, int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int k = 0; k < IC; k++) s += (double)inp[(size_t)i * IC + k] * w[(size_t)o * IC + k];
            out[(size_t)i * OC + o] = s;
        }
}

typedef struct { float *out, *inp, *w, *b, *R; int N, IC, OC; } matmul_ctx;

static double matmul_obj(void *c) {
    matmul_ctx *m = c;
    ops->matmul_forward(m->out, m->inp, m->w, m->b, m->N, m->IC, m->OC, DT_F32, DT_F32);
    return dot_r(m->out, m->R, (size_t)m->N * m->OC);
}

static void test_matmul(void) {
    /* the larger shapes run threaded: gemm.c splits C by rows when it is tall
     * (200x50) and by columns when it is wide (130x200, 64x129) */
    static const int shapes[][3] = {{1, 1, 1}, {5, 7, 6}, {33, 65, 17}, {130, 96, 200}, {64, 300, 129}, {200, 40, 50}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int N = shapes[s][0], IC = shapes[s][1], OC = shapes[s][2];
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            float *inp = rand_buf((size_t)N * IC, 1), *w = rand_buf((size_t)OC * IC, 1);
            float *b = with_bias ? rand_buf(OC, 1) : NULL;
            float *out = rand_buf((size_t)N * OC, 1); /* garbage: forward overwrites */
            double *ref = malloc((size_t)N * OC * sizeof(double));
            ops->matmul_forward(out, inp, w, b, N, IC, OC, DT_F32, DT_F32);
            ref_matmul(ref, inp, w, b, N, IC, OC);
            double e = max_rel_err_d(out, ref, (size_t)N * OC, GEMM_FLOOR);
            CHECK(e < REF_TOL, "matmul_forward N=%d IC=%d OC=%d bias=%d vs naive: max rel err %.1e (tol %.0e)",
                  N, IC, OC, with_bias, e, REF_TOL);
            free(inp), free(w), free(b), free(out), free(ref);
        }
    }

    /* backward vs naive: dinp = dout w, dw = dout^T inp, dbias = colsum(dout);
     * the two shapes split dinp's GEMM by rows and by columns */
    static const int bshapes[][3] = {{130, 96, 200}, {64, 300, 129}};
    for (size_t s = 0; s < 2; s++) {
        int N = bshapes[s][0], IC = bshapes[s][1], OC = bshapes[s][2];
        float *inp = rand_buf((size_t)N * IC, 1), *w = rand_buf((size_t)OC * IC, 1);
        float *dout = rand_buf((size_t)N * OC, 1);
        float *dinp = zero_buf((size_t)N * IC), *dw = zero_buf((size_t)OC * IC), *db = zero_buf(OC);
        ops->matmul_backward(dinp, dw, db, dout, inp, w, N, IC, OC, DT_F32);
        double *rdinp = calloc((size_t)N * IC, sizeof(double)), *rdw = calloc((size_t)OC * IC, sizeof(double));
        double *rdb = calloc(OC, sizeof(double));
        for (int i = 0; i < N; i++)
            for (int o = 0; o < OC; o++) {
                double d = dout[(size_t)i * OC + o];
                rdb[o] += d;
                for (int k = 0; k < IC; k++) {
                    rdinp[(size_t)i * IC + k] += d * w[(size_t)o * IC + k];
                    rdw[(size_t)o * IC + k] += d * inp[(size_t)i * IC + k];
                }
            }
        double e1 = max_rel_err_d(dinp, rdinp, (size_t)N * IC, GEMM_FLOOR);
        double e2 = max_rel_err_d(dw, rdw, (size_t)OC * IC, GEMM_FLOOR);
        double e3 = max_rel_err_d(db, rdb, OC, GEMM_FLOOR);
        CHECK(e1 < REF_TOL && e2 < REF_TOL && e3 < REF_TOL,
              "matmul_backward N=%d IC=%d OC=%d vs naive: dinp %.1e dw %.1e dbias %.1e (tol %.0e)",
              N, IC, OC, e1, e2, e3, REF_TOL);
        free(inp), free(w), free(dout), free(dinp), free(dw), free(db), free(rdinp), free(rdw), free(rdb);
    }

    /* finite differences, accumulate, and NULL dinp/dbias */
    int N = 5, IC = 7, OC = 6;
    matmul_ctx m = {zero_buf((size_t)N * OC), rand_buf((size_t)N * IC, 1), rand_buf((size_t)OC * IC, 1),
                    rand_buf(OC, 1), rand_buf((size_t)N * OC, 1), N, IC, OC};
    float *dinp = zero_buf((size_t)N * IC), *dw = zero_buf((size_t)OC * IC), *db = zero_buf(OC);
    ops->matmul_backward(dinp, dw, db, m.R, m.inp, m.w, N, IC, OC, DT_F32);
    double e_in = fd_check(matmul_obj, &m, m.inp, dinp, (size_t)N * IC);
    double e_w = fd_check(matmul_obj, &m, m.w, dw, (size_t)OC * IC);
    double e_b = fd_check(matmul_obj, &m, m.b, db, OC);
    CHECK(e_in < FD_TOL, "matmul_backward dinp vs finite differences: max rel err %.1e (tol %.0e)", e_in, FD_TOL);
    CHECK(e_w < FD_TOL, "matmul_backward dw vs finite differences: max rel err %.1e (tol %.0e)", e_w, FD_TOL);
    CHECK(e_b < FD_TOL, "matmul_backward dbias vs finite differences: max rel err %.1e (tol %.0e)", e_b, FD_TOL);

    float *dinp2 = zero_buf((size_t)N * IC), *dw2 = zero_buf((size_t)OC * IC), *db2 = zero_buf(OC);
    ops->matmul_backward(dinp2, dw2, db2, m.R, m.inp, m.w, N, IC, OC, DT_F32);
    ops->matmul_backward(dinp2, dw2, db2, m.R, m.inp, m.w, N, IC, OC, DT_F32);
    double a = fmax(accumulate_err(dinp, dinp2, (size_t)N * IC),
                    fmax(accumulate_err(dw, dw2, (size_t)OC * IC), accumulate_err(db, db2, OC)));
    CHECK(a < ACC_TOL, "matmul_backward accumulates (twice = 2x once): err %.1e", a);

    float *dw3 = zero_buf((size_t)OC * IC);
    ops->matmul_backward(NULL, dw3, NULL, m.R, m.inp, m.w, N, IC, OC, DT_F32);
    CHECK(max_rel_err_f(dw3, dw, (size_t)OC * IC, 0) == 0.0, "matmul_backward with dinp = dbias = NULL gives the same dw");
    /* a zero-bubble pipeline's B (dinp alone, dw NULL) then W (dw, dbias): the
     * same bits as the one call, with w unread in W and inp unread in B */
    float *dinp4 = zero_buf((size_t)N * IC), *dw4 = zero_buf((size_t)OC * IC), *db4 = zero_buf(OC);
    ops->matmul_backward(dinp4, NULL, NULL, m.R, NULL, m.w, N, IC, OC, DT_F32);
    ops->matmul_backward(NULL, dw4, db4, m.R, m.inp, NULL, N, IC, OC, DT_F32);
    CHECK(memcmp(dinp4, dinp, (size_t)N * IC * sizeof(float)) == 0 && memcmp(dw4, dw, (size_t)OC * IC * sizeof(float)) == 0 &&
              memcmp(db4, db, (size_t)OC * sizeof(float)) == 0,
          "matmul_backward split in dinp alone and dw + dbias alone is bitwise the combined call");
    free(m.out), free(m.inp), free(m.w), free(m.b), free(m.R);
    free(dinp), free(dw), free(db), free(dinp2), free(dw2), free(db2), free(dw3), free(dinp4), free(dw4), free(db4);
}

/* ------------------------------------------------------------- attention */

/* Straight from the definition (ops.h): NH query heads, NKV kv heads, query
 * head h reading kv head h / (NH / NKV); qkv rows of W = C + 2 NKV hs. */
static void ref_attention_forward(double *out, double *att, const float *qkv,
                                  int B, int T, int C, int NH, int NKV, int causal) {
    int hs = C / NH, W = dt_qkv_cols(C, NH, NKV), Ckv = NKV * hs;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                int g = h / (NH / NKV);
                const float *q = qkv + ((size_t)b * T + t) * W + h * hs;
                double *a = att + (((size_t)b * NH + h) * T + t) * T;
                int valid = causal ? t + 1 : T;
                double mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * W + C + g * hs;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) s += (double)q[i] * k[i];
                    a[j] = s * scale;
                    if (j < valid) mx = fmax(mx, a[j]);
                }
                double sum = 0.0;
                for (int j = 0; j < T; j++) {
                    a[j] = j < valid ? exp(a[j] - mx) : 0.0;
                    sum += a[j];
                }
                for (int j = 0; j < T; j++) a[j] /= sum;
                double *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) {
                    double s = 0.0;
                    for (int j = 0; j < T; j++) s += a[j] * qkv[((size_t)b * T + j) * W + C + Ckv + g * hs + i];
                    o[i] = s;
                }
            }
}

/* Textbook backward in double, from the reference probabilities. */
static void ref_attention_backward(double *dqkv, const float *dout, const float *qkv, const double *att,
                                   int B, int T, int C, int NH, int NKV) {
    int hs = C / NH, W = dt_qkv_cols(C, NH, NKV), Ckv = NKV * hs;
    double scale = 1.0 / sqrt((double)hs);
    double *da = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                int g = h / (NH / NKV);
                const double *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *dO = dout + ((size_t)b * T + t) * C + h * hs;
                double dot = 0.0;
                for (int j = 0; j < T; j++) {
                    const float *v = qkv + ((size_t)b * T + j) * W + C + Ckv + g * hs;
                    double *dv = dqkv + ((size_t)b * T + j) * W + C + Ckv + g * hs;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) {
                        s += (double)dO[i] * v[i];
                        dv[i] += a[j] * dO[i];
                    }
                    da[j] = s;
                    dot += a[j] * s;
                }
                const float *q = qkv + ((size_t)b * T + t) * W + h * hs;
                double *dq = dqkv + ((size_t)b * T + t) * W + h * hs;
                for (int j = 0; j < T; j++) {
                    double ds = a[j] * (da[j] - dot) * scale;
                    const float *k = qkv + ((size_t)b * T + j) * W + C + g * hs;
                    double *dk = dqkv + ((size_t)b * T + j) * W + C + g * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                    }
                }
            }
    free(da);
}

typedef struct { float *out, *att, *qkv, *R; int B, T, C, NH, NKV, causal; } attn_ctx;

static double attn_obj(void *c) {
    attn_ctx *a = c;
    ops->attention_forward(a->out, a->att, a->qkv, a->B, a->T, a->C, a->NH, a->NKV, a->causal, DT_F32);
    return dot_r(a->out, a->R, (size_t)a->B * a->T * a->C);
}

static void test_attention(void) {
    /* {B, T, C, NH, NKV}: multi-head (NKV = NH), grouped-query and multi-query */
    static const int shapes[][5] = {{1, 1, 4, 1, 1},  {2, 5, 8, 2, 2},   {1, 67, 48, 3, 3},  {2, 130, 64, 4, 4},
                                    {1, 64, 32, 2, 2}, {2, 5, 8, 2, 1},   {1, 67, 48, 4, 2}, {2, 130, 64, 4, 1},
                                    {1, 70, 96, 6, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3], NKV = shapes[s][4];
        for (int causal = 0; causal < 2; causal++) {
            size_t nqkv = (size_t)B * T * dt_qkv_cols(C, NH, NKV), nout = (size_t)B * T * C,
                   natt = (size_t)B * NH * T * T;
            float *qkv = rand_buf(nqkv, 1.5f), *out = rand_buf(nout, 1), *att = rand_buf(natt, 1);
            double *rout = malloc(nout * sizeof(double)), *ratt = malloc(natt * sizeof(double));
            ops->attention_forward(out, att, qkv, B, T, C, NH, NKV, causal, DT_F32);
            ref_attention_forward(rout, ratt, qkv, B, T, C, NH, NKV, causal);
            double eo = max_rel_err_d(out, rout, nout, REF_FLOOR);
            double ea = max_rel_err_d(att, ratt, natt, REF_FLOOR);
            CHECK(eo < REF_TOL && ea < REF_TOL,
                  "attention_forward B=%d T=%d C=%d NH=%d NKV=%d %s vs naive: out %.1e att %.1e (tol %.0e)",
                  B, T, C, NH, NKV, causal ? "causal" : "full", eo, ea, REF_TOL);

            float *dout = rand_buf(nout, 1), *dqkv = zero_buf(nqkv), *scratch = rand_buf(natt, 1);
            double *rdqkv = calloc(nqkv, sizeof(double));
            ops->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, causal, DT_F32);
            ref_attention_backward(rdqkv, dout, qkv, ratt, B, T, C, NH, NKV);
            double eb = max_rel_err_d(dqkv, rdqkv, nqkv, REF_FLOOR);
            CHECK(eb < 10 * REF_TOL,
                  "attention_backward B=%d T=%d C=%d NH=%d NKV=%d %s vs naive: dqkv %.1e (tol %.0e)", B, T, C, NH,
                  NKV, causal ? "causal" : "full", eb, 10 * REF_TOL);
            free(qkv), free(out), free(att), free(rout), free(ratt), free(dout), free(dqkv), free(scratch), free(rdqkv);
        }
    }

    /* finite differences: a small case, T=70 > the 64-query causal block, and GQA */
    static const int fd_shapes[][5] = {{2, 7, 8, 2, 2}, {1, 70, 4, 2, 2}, {2, 7, 16, 4, 2}, {1, 9, 12, 3, 1}};
    for (size_t s = 0; s < sizeof fd_shapes / sizeof fd_shapes[0]; s++) {
        for (int causal = 0; causal < 2; causal++) {
            int B = fd_shapes[s][0], T = fd_shapes[s][1], C = fd_shapes[s][2], NH = fd_shapes[s][3];
            int NKV = fd_shapes[s][4];
            size_t nqkv = (size_t)B * T * dt_qkv_cols(C, NH, NKV), nout = (size_t)B * T * C,
                   natt = (size_t)B * NH * T * T;
            attn_ctx a = {zero_buf(nout), zero_buf(natt), rand_buf(nqkv, 1.5f), rand_buf(nout, 1), B, T, C, NH, NKV,
                          causal};
            float *dqkv = zero_buf(nqkv), *scratch = zero_buf(natt);
            attn_obj(&a);
            ops->attention_backward(dqkv, scratch, a.R, a.qkv, a.att, B, T, C, NH, NKV, causal, DT_F32);
            double e = fd_check(attn_obj, &a, a.qkv, dqkv, nqkv);
            CHECK(e < FD_TOL,
                  "attention_backward B=%d T=%d C=%d NH=%d NKV=%d %s dqkv vs finite differences: max rel err %.1e "
                  "(tol %.0e)", B, T, C, NH, NKV, causal ? "causal" : "full", e, FD_TOL);
            if (s == 0 || s == 2) {
                float *dqkv2 = zero_buf(nqkv);
                attn_obj(&a);
                ops->attention_backward(dqkv2, scratch, a.R, a.qkv, a.att, B, T, C, NH, NKV, causal, DT_F32);
                ops->attention_backward(dqkv2, scratch, a.R, a.qkv, a.att, B, T, C, NH, NKV, causal, DT_F32);
                double ae = accumulate_err(dqkv, dqkv2, nqkv);
                CHECK(ae < ACC_TOL, "attention_backward NH=%d NKV=%d %s accumulates (twice = 2x once): err %.1e", NH,
                      NKV, causal ? "causal" : "full", ae);
                free(dqkv2);
            }
            free(a.out), free(a.att), free(a.qkv), free(a.R), free(dqkv), free(scratch);
        }
    }
}

/* Grouped-query attention is multi-head attention whose k and v heads are
 * repeated for each query head of their group: the GQA ops (naive and
 * blockwise) against the NKV == NH ops on such a repeated qkv, forward
 * equal within fp32 rounding, and a kv head's gradient the sum of its
 * repeats' gradients. And decoding over a cache of kv heads only gives the
 * causal forward's last row. */
static void test_gqa_repeat(int B, int T, int C, int NH, int NKV, int causal) {
    int hs = C / NH, G = NH / NKV, W = dt_qkv_cols(C, NH, NKV), W3 = 3 * C, Ckv = NKV * hs;
    int C2 = dt_kv_cols(C, NH, NKV);
    size_t N = (size_t)B * T, nout = N * C, natt = (size_t)B * NH * T * T;
    float *qkv = rand_buf(N * W, 1.5f), *rep = zero_buf(N * W3);
    for (size_t n = 0; n < N; n++) { /* q as it is; kv head h / G into every head h */
        const float *src = qkv + n * W;
        float *dst = rep + n * W3;
        memcpy(dst, src, (size_t)C * sizeof(float));
        for (int h = 0; h < NH; h++) {
            memcpy(dst + C + h * hs, src + C + (h / G) * hs, (size_t)hs * sizeof(float));
            memcpy(dst + 2 * C + h * hs, src + C + Ckv + (h / G) * hs, (size_t)hs * sizeof(float));
        }
    }
    float *o1 = zero_buf(nout), *o2 = zero_buf(nout), *a1 = zero_buf(natt), *a2 = zero_buf(natt);
    ops->attention_forward(o1, a1, qkv, B, T, C, NH, NKV, causal, DT_F32);
    ops->attention_forward(o2, a2, rep, B, T, C, NH, NH, causal, DT_F32);
    double ef = fmax(max_rel_err_f(o1, o2, nout, REF_FLOOR), max_rel_err_f(a1, a2, natt, REF_FLOOR));
    float *dout = rand_buf(nout, 1), *d1 = zero_buf(N * W), *d2 = zero_buf(N * W3), *sc = zero_buf(natt);
    ops->attention_backward(d1, sc, dout, qkv, a1, B, T, C, NH, NKV, causal, DT_F32);
    ops->attention_backward(d2, sc, dout, rep, a2, B, T, C, NH, NH, causal, DT_F32);
    /* fold the repeated heads' gradients back onto their kv head */
    float *fold = zero_buf(N * W);
    for (size_t n = 0; n < N; n++) {
        const float *src = d2 + n * W3;
        float *dst = fold + n * W;
        memcpy(dst, src, (size_t)C * sizeof(float));
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < hs; i++) {
                dst[C + (h / G) * hs + i] += src[C + h * hs + i];
                dst[C + Ckv + (h / G) * hs + i] += src[2 * C + h * hs + i];
            }
    }
    double eb = max_rel_err_f(d1, fold, N * W, REF_FLOOR);
    CHECK(ef < 1e-6 && eb < 1e-5,
          "attention NH=%d NKV=%d B=%d T=%d %s = multi-head attention on k, v repeated per query head: forward %.1e, "
          "backward (kv gradients summed over the group) %.1e", NH, NKV, B, T, causal ? "causal" : "full", ef, eb);

    /* the blockwise ops on one block of every key, from the packed kv */
    float *kv = zero_buf(N * C2), *o3 = zero_buf(nout), *lse = zero_buf((size_t)B * NH * T);
    float *dq = zero_buf(N * W), *dkv = zero_buf(N * C2);
    ops->rows_copy(kv, C2, qkv + C, W, (int)N, C2, 0, DT_F32);
    ops->attention_block_forward(o3, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NKV, causal, 0, DT_F32, DT_F32);
    ops->attention_block_backward(dq, dkv, dout, o3, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NKV, causal, 0, DT_F32);
    ops->rows_copy(dq + C, W, dkv, C2, (int)N, C2, 1, DT_F32);
    double e3 = max_rel_err_f(o3, o1, nout, REF_FLOOR), e4 = max_rel_err_f(dq, d1, N * W, REF_FLOOR);
    CHECK(e3 < 1e-5 && e4 < 1e-4,
          "attention_block NH=%d NKV=%d B=%d T=%d %s = attention_forward/_backward with the same heads: out %.1e, "
          "dqkv %.1e", NH, NKV, B, T, causal ? "causal" : "full", e3, e4);
    /* deterministic: a second backward into a zeroed buffer gives the same bits */
    float *dq2 = zero_buf(N * W), *dkv2 = zero_buf(N * C2);
    ops->attention_block_backward(dq2, dkv2, dout, o3, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NKV, causal, 0, DT_F32);
    ops->rows_copy(dq2 + C, W, dkv2, C2, (int)N, C2, 1, DT_F32);
    CHECK(!memcmp(dq2, dq, N * W * sizeof(float)), "attention_block_backward NH=%d NKV=%d repeats bit for bit", NH,
          NKV);

    /* decoding: sample 0's last row over its cache of kv heads */
    if (causal) {
        float *dec = zero_buf((size_t)C), *scr = zero_buf((size_t)NH * T);
        ops->attention_decode(dec, scr, qkv + (size_t)(T - 1) * W, kv, T, C, NH, NKV, DT_F32);
        double ed = max_rel_err_f(dec, o1 + (size_t)(T - 1) * C, (size_t)C, REF_FLOOR);
        CHECK(ed < 1e-5, "attention_decode NH=%d NKV=%d T=%d over a cache of kv heads (%d values a row) = the causal "
              "forward's last row: %.1e", NH, NKV, T, C2, ed);
        free(dec), free(scr);
    }
    free(qkv), free(rep), free(o1), free(o2), free(a1), free(a2), free(dout), free(d1), free(d2), free(sc), free(fold);
    free(kv), free(o3), free(lse), free(dq), free(dkv), free(dq2), free(dkv2);
}

static void test_gqa(void) {
    test_gqa_repeat(2, 9, 16, 4, 2, 1);
    test_gqa_repeat(2, 9, 16, 4, 2, 0);
    test_gqa_repeat(1, 70, 24, 6, 1, 1);  /* MQA; more rows than a 64-row tile */
    test_gqa_repeat(1, 33, 32, 8, 8, 1);  /* NKV = NH: plain multi-head */
    test_gqa_repeat(1, 1, 32, 4, 2, 1);   /* one position: decoding's first step */
}

/* ------------------------------------------------------------- layernorm */

typedef struct { float *out, *mean, *rstd, *inp, *w, *b, *R; int N, C; } ln_ctx;

static double ln_obj(void *c) {
    ln_ctx *l = c;
    ops->layernorm_forward(l->out, l->mean, l->rstd, l->inp, l->w, l->b, l->N, l->C, 1e-5f, DT_F32);
    return dot_r(l->out, l->R, (size_t)l->N * l->C);
}

static void test_layernorm(void) {
    int N = 6, C = 10;
    ln_ctx l = {zero_buf((size_t)N * C), zero_buf(N), zero_buf(N), rand_buf((size_t)N * C, 2),
                rand_buf(C, 1), rand_buf(C, 1), rand_buf((size_t)N * C, 1), N, C};
    /* forward vs double reference; one row far from zero to test cancellation */
    for (int c = 0; c < C; c++) l.inp[c] += 1000.0f;
    ln_obj(&l);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        const float *x = l.inp + (size_t)i * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        double rs = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++)
            worst = fmax(worst, rel_err(l.out[(size_t)i * C + c], (x[c] - m) * rs * l.w[c] + l.b[c], REF_FLOOR));
        worst = fmax(worst, rel_err(l.mean[i], m, REF_FLOOR));
        worst = fmax(worst, rel_err(l.rstd[i], rs, REF_FLOOR));
    }
    /* the +1000 row carries fp32 input rounding (ulp 6e-5 over a spread of ~1) */
    CHECK(worst < 1e-3, "layernorm_forward vs double reference: max rel err %.1e (tol 1e-3)", worst);
    for (int c = 0; c < C; c++) l.inp[c] -= 1000.0f;
    ln_obj(&l);

    float *dinp = zero_buf((size_t)N * C), *dw = zero_buf(C), *db = zero_buf(C);
    ops->layernorm_backward(dinp, dw, db, l.R, l.inp, l.w, l.mean, l.rstd, N, C, DT_F32);
    double e_in = fd_check(ln_obj, &l, l.inp, dinp, (size_t)N * C);
    double e_w = fd_check(ln_obj, &l, l.w, dw, C);
    double e_b = fd_check(ln_obj, &l, l.b, db, C);
    CHECK(e_in < FD_TOL, "layernorm_backward dinp vs finite differences: max rel err %.1e (tol %.0e)", e_in, FD_TOL);
    CHECK(e_w < FD_TOL, "layernorm_backward dw vs finite differences: max rel err %.1e (tol %.0e)", e_w, FD_TOL);
    CHECK(e_b < FD_TOL, "layernorm_backward db vs finite differences: max rel err %.1e (tol %.0e)", e_b, FD_TOL);

    ln_obj(&l);
    float *dinp2 = zero_buf((size_t)N * C), *dw2 = zero_buf(C), *db2 = zero_buf(C);
    ops->layernorm_backward(dinp2, dw2, db2, l.R, l.inp, l.w, l.mean, l.rstd, N, C, DT_F32);
    ops->layernorm_backward(dinp2, dw2, db2, l.R, l.inp, l.w, l.mean, l.rstd, N, C, DT_F32);
    double a = fmax(accumulate_err(dinp, dinp2, (size_t)N * C), fmax(accumulate_err(dw, dw2, C), accumulate_err(db, db2, C)));
    CHECK(a < ACC_TOL, "layernorm_backward accumulates (twice = 2x once): err %.1e", a);

    /* large enough to run threaded: dw/db from per-thread partials vs serial sums */
    int N2 = 512, C2 = 96;
    float *x = rand_buf((size_t)N2 * C2, 1), *w = rand_buf(C2, 1), *b = rand_buf(C2, 1), *d = rand_buf((size_t)N2 * C2, 1);
    float *o = zero_buf((size_t)N2 * C2), *mu = zero_buf(N2), *rs = zero_buf(N2);
    float *gx = zero_buf((size_t)N2 * C2), *gw = zero_buf(C2), *gb = zero_buf(C2);
    ops->layernorm_forward(o, mu, rs, x, w, b, N2, C2, 1e-5f, DT_F32);
    ops->layernorm_backward(gx, gw, gb, d, x, w, mu, rs, N2, C2, DT_F32);
    double *rw = calloc(C2, sizeof(double)), *rb = calloc(C2, sizeof(double));
    for (int i = 0; i < N2; i++)
        for (int c = 0; c < C2; c++) {
            size_t k = (size_t)i * C2 + c;
            rb[c] += d[k];
            rw[c] += d[k] * ((double)x[k] - mu[i]) * rs[i];
        }
    double ew = max_rel_err_d(gw, rw, C2, 1.0), eb = max_rel_err_d(gb, rb, C2, 1.0);
    CHECK(ew < REF_TOL && eb < REF_TOL, "layernorm_backward N=%d C=%d threaded dw %.1e db %.1e vs double sums (tol %.0e)",
          N2, C2, ew, eb, REF_TOL);
    free(x), free(w), free(b), free(d), free(o), free(mu), free(rs), free(gx), free(gw), free(gb), free(rw), free(rb);

    /* eps is the caller's (model.norm_eps): a row of variance ~1e-8 normalises
     * to unit spread with HF ViT's 1e-12, to far less with GPT-2's 1e-5 */
    float tiny[8], to[8], tm, tr, one[8], zero8[8] = {0};
    for (int c = 0; c < 8; c++) tiny[c] = 1e-4f * (float)(c - 3.5) / 3.5f, one[c] = 1.0f;
    double worst_eps = 0.0;
    for (int k = 0; k < 2; k++) {
        float eps = k ? 1e-12f : 1e-5f;
        ops->layernorm_forward(to, &tm, &tr, tiny, one, zero8, 1, 8, eps, DT_F32);
        double m = 0, v = 0;
        for (int c = 0; c < 8; c++) m += tiny[c];
        m /= 8;
        for (int c = 0; c < 8; c++) v += (tiny[c] - m) * (tiny[c] - m);
        double rsd = 1.0 / sqrt(v / 8 + (double)eps);
        for (int c = 0; c < 8; c++) worst_eps = fmax(worst_eps, rel_err(to[c], (tiny[c] - m) * rsd, REF_FLOOR));
    }
    CHECK(worst_eps < 1e-4, "layernorm_forward honours eps (1e-5 and 1e-12) on a row of variance 4e-9: max rel err %.1e",
          worst_eps);
    free(l.out), free(l.mean), free(l.rstd), free(l.inp), free(l.w), free(l.b), free(l.R);
    free(dinp), free(dw), free(db), free(dinp2), free(dw2), free(db2);
}

/* ------------------------------------------------------------- rmsnorm */

typedef struct { float *out, *rstd, *inp, *w, *R; int N, C; float eps; } rms_ctx;

static double rms_obj(void *c) {
    rms_ctx *l = c;
    ops->rmsnorm_forward(l->out, l->rstd, l->inp, l->w, l->N, l->C, l->eps, DT_F32);
    return dot_r(l->out, l->R, (size_t)l->N * l->C);
}

static void test_rmsnorm(void) {
    int N = 6, C = 10;
    rms_ctx l = {zero_buf((size_t)N * C), zero_buf(N), rand_buf((size_t)N * C, 2), rand_buf(C, 1),
                 rand_buf((size_t)N * C, 1), N, C, 1e-5f};
    for (int c = 0; c < C; c++) l.inp[c] += 1000.0f; /* no mean is subtracted: a row far from 0 stays there */
    rms_obj(&l);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        const float *x = l.inp + (size_t)i * C;
        double ms = 0;
        for (int c = 0; c < C; c++) ms += (double)x[c] * x[c];
        double rs = 1.0 / sqrt(ms / C + 1e-5);
        for (int c = 0; c < C; c++)
            worst = fmax(worst, rel_err(l.out[(size_t)i * C + c], x[c] * rs * l.w[c], REF_FLOOR));
        worst = fmax(worst, rel_err(l.rstd[i], rs, 1e-6));
    }
    CHECK(worst < REF_TOL, "rmsnorm_forward vs double x / sqrt(mean(x^2) + eps) * w: max rel err %.1e (tol %.0e)",
          worst, REF_TOL);
    for (int c = 0; c < C; c++) l.inp[c] -= 1000.0f;
    rms_obj(&l);
    float *dinp = zero_buf((size_t)N * C), *dw = zero_buf(C);
    ops->rmsnorm_backward(dinp, dw, l.R, l.inp, l.w, l.rstd, N, C, DT_F32);
    double e_in = fd_check(rms_obj, &l, l.inp, dinp, (size_t)N * C);
    double e_w = fd_check(rms_obj, &l, l.w, dw, C);
    CHECK(e_in < FD_TOL && e_w < FD_TOL,
          "rmsnorm_backward vs finite differences: dinp %.1e, dw %.1e (tol %.0e)", e_in, e_w, FD_TOL);
    rms_obj(&l);
    float *dinp2 = zero_buf((size_t)N * C), *dw2 = zero_buf(C);
    ops->rmsnorm_backward(dinp2, dw2, l.R, l.inp, l.w, l.rstd, N, C, DT_F32);
    ops->rmsnorm_backward(dinp2, dw2, l.R, l.inp, l.w, l.rstd, N, C, DT_F32);
    double a = fmax(accumulate_err(dinp, dinp2, (size_t)N * C), accumulate_err(dw, dw2, C));
    CHECK(a < ACC_TOL, "rmsnorm_backward accumulates (twice = 2x once): err %.1e", a);

    /* threaded (per-thread dw partials) against double sums; Llama's eps */
    int N2 = 512, C2 = 96;
    float *x = rand_buf((size_t)N2 * C2, 1), *w = rand_buf(C2, 1), *d = rand_buf((size_t)N2 * C2, 1);
    float *o = zero_buf((size_t)N2 * C2), *rs = zero_buf(N2), *gx = zero_buf((size_t)N2 * C2), *gw = zero_buf(C2);
    ops->rmsnorm_forward(o, rs, x, w, N2, C2, 1e-6f, DT_F32);
    ops->rmsnorm_backward(gx, gw, d, x, w, rs, N2, C2, DT_F32);
    double *rw = calloc(C2, sizeof(double));
    for (int i = 0; i < N2; i++)
        for (int c = 0; c < C2; c++) rw[c] += d[(size_t)i * C2 + c] * ((double)x[(size_t)i * C2 + c] * rs[i]);
    double ew = max_rel_err_d(gw, rw, C2, 1.0);
    CHECK(ew < REF_TOL, "rmsnorm_backward N=%d C=%d threaded dw %.1e vs double sums (tol %.0e)", N2, C2, ew, REF_TOL);

    /* the fused residual: the two ops' bits (cpu), res aliasing a in fp32 */
    float *ra = rand_buf((size_t)N2 * C2, 1), *res = zero_buf((size_t)N2 * C2), *o2 = zero_buf((size_t)N2 * C2);
    float *rs2 = zero_buf(N2), *alias = malloc((size_t)N2 * C2 * sizeof(float));
    ops->residual_forward(res, ra, x, (size_t)N2 * C2, DT_F32);
    ops->rmsnorm_forward(o, rs, res, w, N2, C2, 1e-6f, DT_F32);
    memcpy(alias, ra, (size_t)N2 * C2 * sizeof(float));
    ops->residual_rmsnorm_forward(alias, o2, rs2, alias, x, w, N2, C2, 1e-6f, DT_F32);
    CHECK(!memcmp(alias, res, (size_t)N2 * C2 * 4) && !memcmp(o2, o, (size_t)N2 * C2 * 4) && !memcmp(rs2, rs, N2 * 4),
          "residual_rmsnorm_forward (res aliasing a) = residual_forward then rmsnorm_forward, bit for bit");

    /* layernorm on a zero-mean row without bias is RMSNorm: the shared loops */
    float row[8] = {1, -2, 3, -4, 4, -3, 2, -1}, one[8] = {1, 1, 1, 1, 1, 1, 1, 1}, zero8[8] = {0};
    float lo[8], ro[8], lm, lr, rr;
    ops->layernorm_forward(lo, &lm, &lr, row, one, zero8, 1, 8, 1e-5f, DT_F32);
    ops->rmsnorm_forward(ro, &rr, row, one, 1, 8, 1e-5f, DT_F32);
    CHECK(lm == 0.0f && lr == rr && !memcmp(lo, ro, sizeof lo),
          "rmsnorm_forward of a zero-mean row = layernorm_forward without bias, bit for bit");
    free(l.out), free(l.rstd), free(l.inp), free(l.w), free(l.R), free(dinp), free(dw), free(dinp2), free(dw2);
    free(x), free(w), free(d), free(o), free(rs), free(gx), free(gw), free(rw), free(ra), free(res), free(o2),
        free(rs2), free(alias);
}

/* -------------------------------------------------------------- swiglu */

typedef struct { float *out, *inp, *R; int N, F; } swiglu_ctx;

static double swiglu_obj(void *c) {
    swiglu_ctx *g = c;
    ops->swiglu_forward(g->out, g->inp, g->N, g->F, DT_F32);
    return dot_r(g->out, g->R, (size_t)g->N * g->F);
}

static void test_swiglu(void) {
    int N = 5, F = 12;
    swiglu_ctx g = {zero_buf((size_t)N * F), rand_buf((size_t)N * 2 * F, 4), rand_buf((size_t)N * F, 1), N, F};
    g.inp[0] = -30.0f, g.inp[1] = 30.0f; /* SiLU's tails: -30 e^-30 ~ 0 and 30 */
    swiglu_obj(&g);
    double worst = 0.0;
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            double x = g.inp[(size_t)n * 2 * F + f], u = g.inp[(size_t)n * 2 * F + F + f];
            worst = fmax(worst, rel_err(g.out[(size_t)n * F + f], x / (1.0 + exp(-x)) * u, REF_FLOOR));
        }
    CHECK(worst < REF_TOL, "swiglu_forward vs double SiLU(gate) * up (gate columns [0,F), up [F,2F)): max rel err %.1e "
          "(tol %.0e)", worst, REF_TOL);
    float *d = zero_buf((size_t)N * 2 * F), *d2 = zero_buf((size_t)N * 2 * F);
    ops->swiglu_backward(d, g.inp, g.R, N, F, DT_F32);
    double e = fd_check(swiglu_obj, &g, g.inp, d, (size_t)N * 2 * F);
    CHECK(e < FD_TOL, "swiglu_backward dgate, dup vs finite differences: max rel err %.1e (tol %.0e)", e, FD_TOL);
    ops->swiglu_backward(d2, g.inp, g.R, N, F, DT_F32);
    ops->swiglu_backward(d2, g.inp, g.R, N, F, DT_F32);
    CHECK(accumulate_err(d, d2, (size_t)N * 2 * F) < ACC_TOL, "swiglu_backward accumulates (twice = 2x once)");
    /* large enough to run threaded: the same per element as the small rows */
    int N2 = 300, F2 = 160;
    float *x = rand_buf((size_t)N2 * 2 * F2, 6), *o = zero_buf((size_t)N2 * F2);
    ops->swiglu_forward(o, x, N2, F2, DT_F32);
    double w2 = 0.0;
    for (int n = 0; n < N2; n++)
        for (int f = 0; f < F2; f++) {
            double gx = x[(size_t)n * 2 * F2 + f], u = x[(size_t)n * 2 * F2 + F2 + f];
            w2 = fmax(w2, rel_err(o[(size_t)n * F2 + f], gx / (1.0 + exp(-gx)) * u, REF_FLOOR));
        }
    CHECK(w2 < REF_TOL, "swiglu_forward N=%d F=%d (threaded, vector expf) vs double: max rel err %.1e", N2, F2, w2);
    free(g.out), free(g.inp), free(g.R), free(d), free(d2), free(x), free(o);
}

/* ---------------------------------------------------------------- rope */

/* HF's apply_rotary_pos_emb in double: x * cat(cos, cos) + rotate_half(x) *
 * cat(sin, sin), rotate_half(x) = cat(-x2, x1), angle p theta^(-2i/hs). */
static void ref_rope_head(double *out, const float *x, int hs, int p, double theta) {
    int half = hs / 2;
    for (int c = 0; c < hs; c++) {
        int i = c % half;
        double a = p * pow(theta, -2.0 * i / hs);
        double rot = c < half ? -(double)x[c + half] : (double)x[c - half];
        out[c] = x[c] * cos(a) + rot * sin(a);
    }
}

typedef struct { float *x, *work, *R, *cs; int *pos; int N, ld, nh, hs; } rope_ctx;

static double rope_obj(void *c) {
    rope_ctx *r = c;
    size_t n = (size_t)r->N * r->ld;
    memcpy(r->work, r->x, n * sizeof(float));
    ops->rope_forward(r->work, r->ld, r->nh, r->hs, r->pos, r->cs, r->N, DT_F32);
    return dot_r(r->work, r->R, n);
}

static void test_rope(void) {
    int hs = 16, half = 8, maxp = 40;
    float theta = 500000.0f;
    float *cs = zero_buf((size_t)maxp * hs);
    ops->rope_table(cs, maxp, hs, theta);
    int tab_ok = 1;
    for (int p = 0; p < maxp; p++)
        for (int i = 0; i < half; i++) {
            double a = p * pow((double)theta, -2.0 * i / hs);
            tab_ok &= cs[(size_t)p * hs + i] == (float)cos(a) && cs[(size_t)p * hs + half + i] == (float)sin(a);
        }
    CHECK(tab_ok, "rope_table: row p = cos(p f_i) then sin(p f_i), f_i = theta^(-2i/hs), double rounded to fp32 once");

    /* a qkv-like buffer: 3 q heads + 1 k head rotated, 1 v head (and a spare column) left alone; positions
     * of two packed samples (restarting at 0) and of a cp rank's non-contiguous chunks */
    int N = 7, nh = 4, ld = 5 * hs + 1;
    int pos[7] = {0, 1, 2, 0, 1, 37, 38};
    rope_ctx r = {rand_buf((size_t)N * ld, 1), zero_buf((size_t)N * ld), rand_buf((size_t)N * ld, 1), cs, pos, N, ld,
                  nh, hs};
    rope_obj(&r);
    double worst = 0.0, ref[16];
    int kept = 1, bits = 1;
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < nh; j++) {
            const float *x = r.x + (size_t)n * ld + j * hs;
            const float *y = r.work + (size_t)n * ld + j * hs;
            ref_rope_head(ref, x, hs, pos[n], theta);
            for (int c = 0; c < hs; c++) worst = fmax(worst, rel_err(y[c], ref[c], REF_FLOOR));
            /* the contract's roundings: two products rounded, their sum rounded (no FMA) */
            const float *co = cs + (size_t)pos[n] * hs, *si = co + half;
            for (int i = 0; i < half; i++) {
                volatile float p1 = x[i] * co[i], p2 = x[i + half] * si[i], p3 = x[i + half] * co[i], p4 = x[i] * si[i];
                bits &= y[i] == p1 - p2 && y[i + half] == p3 + p4;
            }
        }
        kept &= !memcmp(r.work + (size_t)n * ld + nh * hs, r.x + (size_t)n * ld + nh * hs,
                        (size_t)(ld - nh * hs) * sizeof(float));
    }
    CHECK(worst < REF_TOL && kept,
          "rope_forward (rotate-half) vs HF's apply_rotary_pos_emb in double, per-row positions (packed samples, "
          "cp chunks): max rel err %.1e; columns past the heads untouched", worst);
    CHECK(bits, "rope_forward: x[i] c - x[i+hs/2] s and x[i+hs/2] c + x[i] s, each product rounded, no FMA (the "
          "CUDA twin's bits)");
    /* relative positions: <rope(q, p), rope(k, p')> depends on p - p' only */
    {
        float q[16], k[16], qa[16], ka[16], qb[16], kb[16];
        for (int c = 0; c < hs; c++) q[c] = frand(), k[c] = frand();
        int pa[2] = {3, 1}, pb[2] = {30, 28};
        memcpy(qa, q, sizeof q), memcpy(ka, k, sizeof k), memcpy(qb, q, sizeof q), memcpy(kb, k, sizeof k);
        ops->rope_forward(qa, hs, 1, hs, pa, cs, 1, DT_F32);
        ops->rope_forward(ka, hs, 1, hs, pa + 1, cs, 1, DT_F32);
        ops->rope_forward(qb, hs, 1, hs, pb, cs, 1, DT_F32);
        ops->rope_forward(kb, hs, 1, hs, pb + 1, cs, 1, DT_F32);
        double da = 0, db = 0;
        for (int c = 0; c < hs; c++) da += (double)qa[c] * ka[c], db += (double)qb[c] * kb[c];
        CHECK(fabs(da - db) < 1e-5, "rope: q.k at positions (3, 1) = at (30, 28): %.7f vs %.7f", da, db);
    }
    /* backward: finite differences, and in place (not accumulating) */
    float *g = malloc((size_t)N * ld * sizeof(float));
    memcpy(g, r.R, (size_t)N * ld * sizeof(float));
    ops->rope_backward(g, ld, nh, hs, pos, cs, N);
    double e = fd_check(rope_obj, &r, r.x, g, (size_t)N * ld);
    CHECK(e < FD_TOL, "rope_backward (in place on the output gradient) vs finite differences: max rel err %.1e", e);
    /* backward after forward gives the input back (a rotation's transpose is its inverse) */
    memcpy(r.work, r.x, (size_t)N * ld * sizeof(float));
    ops->rope_forward(r.work, ld, nh, hs, pos, cs, N, DT_F32);
    ops->rope_backward(r.work, ld, nh, hs, pos, cs, N);
    CHECK(max_rel_err_f(r.work, r.x, (size_t)N * ld, 1.0) < 1e-6, "rope_backward(rope_forward(x)) = x within fp32");
    /* large enough to run threaded */
    int N2 = 600, nh2 = 12, hs2 = 64, ld2 = nh2 * hs2;
    float *cs2 = zero_buf((size_t)N2 * hs2), *x2 = rand_buf((size_t)N2 * ld2, 1), *y2 = malloc((size_t)N2 * ld2 * 4);
    int *pos2 = malloc(N2 * sizeof(int));
    for (int n = 0; n < N2; n++) pos2[n] = (n * 7) % N2;
    ops->rope_table(cs2, N2, hs2, 10000.0f);
    memcpy(y2, x2, (size_t)N2 * ld2 * 4);
    ops->rope_forward(y2, ld2, nh2, hs2, pos2, cs2, N2, DT_F32);
    double w2 = 0.0, ref2[64];
    for (int n = 0; n < N2; n += 37)
        for (int j = 0; j < nh2; j++) {
            ref_rope_head(ref2, x2 + (size_t)n * ld2 + j * hs2, hs2, pos2[n], 10000.0);
            for (int c = 0; c < hs2; c++) w2 = fmax(w2, rel_err(y2[(size_t)n * ld2 + j * hs2 + c], ref2[c], REF_FLOOR));
        }
    CHECK(w2 < REF_TOL, "rope_forward N=%d (threaded), hs %d, positions up to %d vs double: max rel err %.1e", N2,
          hs2, N2 - 1, w2);
    free(cs), free(r.x), free(r.work), free(r.R), free(g), free(cs2), free(x2), free(y2), free(pos2);
}

/* ------------------------------------------------------ gelu, residual */

typedef struct { float *out, *inp, *R; size_t n; } gelu_erf_ctx;

static double gelu_erf_obj(void *c) {
    gelu_erf_ctx *g = c;
    ops->gelu_erf_forward(g->out, g->inp, g->n, DT_F32);
    return dot_r(g->out, g->R, g->n);
}

/* the exact GELU (model.activation gelu): forward vs erf in double, backward
 * vs finite differences, accumulation, the tails */
static void test_gelu_erf(void) {
    size_t n = 200;
    gelu_erf_ctx g = {zero_buf(n), rand_buf(n, 4), rand_buf(n, 1), n};
    gelu_erf_obj(&g);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = g.inp[i];
        worst = fmax(worst, rel_err(g.out[i], 0.5 * x * (1.0 + erf(x / sqrt(2.0))), REF_FLOOR));
    }
    CHECK(worst < REF_TOL, "gelu_erf_forward vs double erf formula: max rel err %.1e (tol %.0e)", worst, REF_TOL);
    float *dinp = zero_buf(n), *dinp2 = zero_buf(n);
    ops->gelu_erf_backward(dinp, g.inp, g.R, n, DT_F32);
    double e = fd_check(gelu_erf_obj, &g, g.inp, dinp, n);
    CHECK(e < FD_TOL, "gelu_erf_backward dinp vs finite differences: max rel err %.1e (tol %.0e)", e, FD_TOL);
    ops->gelu_erf_backward(dinp2, g.inp, g.R, n, DT_F32);
    ops->gelu_erf_backward(dinp2, g.inp, g.R, n, DT_F32);
    CHECK(accumulate_err(dinp, dinp2, n) < ACC_TOL, "gelu_erf_backward accumulates (twice = 2x once)");
    size_t big = 100000;
    float *x = rand_buf(big, 12), *y = zero_buf(big);
    ops->gelu_erf_forward(y, x, big, DT_F32);
    double w2 = 0.0;
    for (size_t i = 0; i < big; i++) {
        double xd = x[i];
        w2 = fmax(w2, rel_err(y[i], 0.5 * xd * (1.0 + erf(xd / sqrt(2.0))), REF_FLOOR));
    }
    CHECK(w2 < REF_TOL, "gelu_erf_forward n=%zu on [-12,12] vs double: max rel err %.1e (tol %.0e)", big, w2, REF_TOL);
    free(x), free(y), free(g.out), free(g.inp), free(g.R), free(dinp), free(dinp2);
}

typedef struct { float *out, *inp, *R; size_t n; } gelu_ctx;

static double gelu_obj(void *c) {
    gelu_ctx *g = c;
    ops->gelu_forward(g->out, g->inp, g->n, DT_F32);
    return dot_r(g->out, g->R, g->n);
}

static void test_gelu(void) {
    size_t n = 200;
    gelu_ctx g = {zero_buf(n), rand_buf(n, 4), rand_buf(n, 1), n};
    gelu_obj(&g);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = g.inp[i];
        double ref = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        worst = fmax(worst, rel_err(g.out[i], ref, REF_FLOOR));
    }
    CHECK(worst < REF_TOL, "gelu_forward vs double tanh formula: max rel err %.1e (tol %.0e)", worst, REF_TOL);
    float *dinp = zero_buf(n), *dinp2 = zero_buf(n);
    ops->gelu_backward(dinp, g.inp, g.R, n, DT_F32);
    double e = fd_check(gelu_obj, &g, g.inp, dinp, n);
    CHECK(e < FD_TOL, "gelu_backward dinp vs finite differences: max rel err %.1e (tol %.0e)", e, FD_TOL);
    ops->gelu_backward(dinp2, g.inp, g.R, n, DT_F32);
    ops->gelu_backward(dinp2, g.inp, g.R, n, DT_F32);
    CHECK(accumulate_err(dinp, dinp2, n) < ACC_TOL, "gelu_backward accumulates (twice = 2x once)");

    /* threaded size and the large-|x| tails (tanh saturates, no NaN) */
    size_t big = 100000;
    float *x = rand_buf(big, 12), *y = zero_buf(big);
    ops->gelu_forward(y, x, big, DT_F32);
    double w2 = 0.0;
    for (size_t i = 0; i < big; i++) {
        double xd = x[i];
        double ref = 0.5 * xd * (1.0 + tanh(sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd)));
        w2 = fmax(w2, rel_err(y[i], ref, REF_FLOOR));
    }
    CHECK(w2 < REF_TOL, "gelu_forward n=%zu on [-12,12] vs double: max rel err %.1e (tol %.0e)", big, w2, REF_TOL);
    free(x), free(y), free(g.out), free(g.inp), free(g.R), free(dinp), free(dinp2);
}

typedef struct { float *out, *a, *b, *R; size_t n; } res_ctx;

static double res_obj(void *c) {
    res_ctx *r = c;
    ops->residual_forward(r->out, r->a, r->b, r->n, DT_F32);
    return dot_r(r->out, r->R, r->n);
}

static void test_residual(void) {
    size_t n = 50;
    res_ctx r = {zero_buf(n), rand_buf(n, 1), rand_buf(n, 1), rand_buf(n, 1), n};
    float *da = zero_buf(n), *db = zero_buf(n);
    ops->residual_backward(da, db, r.R, n);
    double ea = fd_check(res_obj, &r, r.a, da, n), eb = fd_check(res_obj, &r, r.b, db, n);
    CHECK(ea < FD_TOL && eb < FD_TOL, "residual_backward da %.1e db %.1e vs finite differences (tol %.0e)", ea, eb, FD_TOL);
    ops->residual_backward(da, db, r.R, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= da[i] == 2 * r.R[i] && db[i] == 2 * r.R[i];
    CHECK(ok, "residual_backward accumulates (twice = 2x once)");
    /* out aliasing a is allowed */
    float *a2 = malloc(n * sizeof(float));
    memcpy(a2, r.a, n * sizeof(float));
    ops->residual_forward(a2, a2, r.b, n, DT_F32);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= a2[i] == r.a[i] + r.b[i];
    CHECK(ok, "residual_forward with out aliasing a");
    free(a2), free(r.out), free(r.a), free(r.b), free(r.R), free(da), free(db);
}

/* ------------------------------------------------ embedding, posadd, patch */

typedef struct { float *out, *wte, *R; const int *tok; int v0, vn, N, C; } emb_ctx;

static double emb_obj(void *c) {
    emb_ctx *e = c;
    ops->embedding_forward(e->out, e->tok, e->wte, e->v0, e->vn, e->N, e->C);
    return dot_r(e->out, e->R, (size_t)e->N * e->C);
}

static void test_embedding(void) {
    enum { N = 9, C = 5, V = 7, V0 = 3 };
    static const int tok[N] = {0, 6, 3, 3, 2, 5, 0, 1, 4}; /* repeats: a scatter-add */
    emb_ctx e = {zero_buf(N * C), rand_buf(V * C, 1), rand_buf(N * C, 1), tok, 0, V, N, C};
    float *dwte = zero_buf(V * C), *dwte2 = zero_buf(V * C);
    ops->embedding_backward(dwte, e.R, tok, 0, V, N, C);
    double err = fd_check(emb_obj, &e, e.wte, dwte, V * C);
    CHECK(err < FD_TOL, "embedding_backward dwte vs finite differences: max rel err %.1e (tol %.0e)", err, FD_TOL);
    ops->embedding_backward(dwte2, e.R, tok, 0, V, N, C);
    ops->embedding_backward(dwte2, e.R, tok, 0, V, N, C);
    CHECK(accumulate_err(dwte, dwte2, V * C) < ACC_TOL, "embedding_backward accumulates (twice = 2x once)");

    /* vocab-parallel: rows [0,V0) on one rank, [V0,V) on another. The sum of the
     * two outputs is the full output; the two dwte shards are the full dwte. */
    float *full = zero_buf(N * C), *s0 = rand_buf(N * C, 1), *s1 = rand_buf(N * C, 1);
    ops->embedding_forward(full, tok, e.wte, 0, V, N, C);
    ops->embedding_forward(s0, tok, e.wte, 0, V0, N, C);
    ops->embedding_forward(s1, tok, e.wte + V0 * C, V0, V - V0, N, C);
    int ok = 1;
    for (int i = 0; i < N * C; i++) ok &= s0[i] + s1[i] == full[i] && (s0[i] == 0 || s1[i] == 0);
    for (int i = 0; i < N; i++) ok &= memcmp(full + i * C, e.wte + tok[i] * C, C * sizeof(float)) == 0;
    CHECK(ok, "embedding_forward vocab-parallel: 2 shards sum to the unsplit rows (exact)");
    float *g = zero_buf(V * C);
    ops->embedding_backward(g, e.R, tok, 0, V0, N, C);
    ops->embedding_backward(g + V0 * C, e.R, tok, V0, V - V0, N, C);
    CHECK(memcmp(g, dwte, V * C * sizeof(float)) == 0, "embedding_backward vocab-parallel: shards concatenate to the unsplit dwte");
    free(e.out), free(e.wte), free(e.R), free(dwte), free(dwte2), free(full), free(s0), free(s1), free(g);
}

typedef struct { float *x, *x0, *wpe, *R; int B, T, C; } pos_ctx;

static double pos_obj(void *c) {
    pos_ctx *p = c;
    size_t n = (size_t)p->B * p->T * p->C;
    memcpy(p->x, p->x0, n * sizeof(float));
    ops->posadd_forward(p->x, p->wpe, NULL, p->B, p->T, p->C);
    return dot_r(p->x, p->R, n);
}

static void test_posadd(void) {
    int B = 3, T = 4, C = 5;
    size_t n = (size_t)B * T * C;
    pos_ctx p = {zero_buf(n), rand_buf(n, 1), rand_buf((size_t)T * C, 1), rand_buf(n, 1), B, T, C};
    pos_obj(&p);
    int ok = 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                size_t k = ((size_t)b * T + t) * C + c;
                ok &= p.x[k] == p.x0[k] + p.wpe[t * C + c];
            }
    CHECK(ok, "posadd_forward adds wpe[t] to every sample (exact)");
    float *dwpe = zero_buf((size_t)T * C), *dwpe2 = zero_buf((size_t)T * C);
    ops->posadd_backward(dwpe, p.R, NULL, B, T, C);
    double e = fd_check(pos_obj, &p, p.wpe, dwpe, (size_t)T * C);
    CHECK(e < FD_TOL, "posadd_backward dwpe vs finite differences: max rel err %.1e (tol %.0e)", e, FD_TOL);
    ops->posadd_backward(dwpe2, p.R, NULL, B, T, C);
    ops->posadd_backward(dwpe2, p.R, NULL, B, T, C);
    CHECK(accumulate_err(dwpe, dwpe2, (size_t)T * C) < ACC_TOL, "posadd_backward accumulates (twice = 2x once)");
    /* per-row positions (packed samples restart at 0): forward exact; the
     * backward a scatter-add, each wpe row the sum of its rows' gradients in
     * row order; pos[n] = n % T gives the plain form's bits */
    int pos[12] = {0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 0, 1}, plain[12];
    for (int i = 0; i < B * T; i++) plain[i] = i % T;
    memcpy(p.x, p.x0, n * sizeof(float));
    ops->posadd_forward(p.x, p.wpe, pos, B, T, C);
    ok = 1;
    for (int i = 0; i < B * T; i++)
        for (int c = 0; c < C; c++) ok &= p.x[(size_t)i * C + c] == p.x0[(size_t)i * C + c] + p.wpe[pos[i] * C + c];
    CHECK(ok, "posadd_forward with positions adds wpe[pos[n]] to row n (exact)");
    float *dpos = zero_buf((size_t)T * C), *want = zero_buf((size_t)T * C), *dplain = zero_buf((size_t)T * C);
    ops->posadd_backward(dpos, p.R, pos, B, T, C);
    for (int i = 0; i < B * T; i++)
        for (int c = 0; c < C; c++) want[pos[i] * C + c] += p.R[(size_t)i * C + c];
    ops->posadd_backward(dplain, p.R, plain, B, T, C);
    CHECK(!memcmp(dpos, want, (size_t)T * C * sizeof(float)) &&
              !memcmp(dplain, dwpe, (size_t)T * C * sizeof(float)),
          "posadd_backward with positions: dwpe[p] = the sum of its rows' gradients in row order (exact; "
          "positions n %% T give the plain form's bits)");
    free(p.x), free(p.x0), free(p.wpe), free(p.R), free(dwpe), free(dwpe2), free(dpos), free(want), free(dplain);
}

typedef struct { float *out, *img, *w, *b, *R; int B, ch, S, P, C; } patch_ctx;

static double patch_obj(void *c) {
    patch_ctx *p = c;
    ops->patch_forward(p->out, p->img, p->w, p->b, p->B, p->ch, p->S, p->P, p->C);
    int G = p->S / p->P;
    return dot_r(p->out, p->R, (size_t)p->B * G * G * p->C);
}

static void test_patch(void) {
    int B = 2, ch = 3, S = 6, P = 3, C = 5, G = S / P, NP = G * G, K = ch * P * P;
    size_t nout = (size_t)B * NP * C;
    patch_ctx p = {rand_buf(nout, 1), rand_buf((size_t)B * ch * S * S, 1), rand_buf((size_t)C * K, 1),
                   rand_buf(C, 1), rand_buf(nout, 1), B, ch, S, P, C};
    patch_obj(&p);
    /* direct convolution: patch (gy,gx), weight index (c, py, px) */
    double worst = 0.0;
    for (int b = 0; b < B; b++)
        for (int gy = 0; gy < G; gy++)
            for (int gx = 0; gx < G; gx++)
                for (int o = 0; o < C; o++) {
                    double s = p.b[o];
                    for (int c = 0; c < ch; c++)
                        for (int py = 0; py < P; py++)
                            for (int px = 0; px < P; px++)
                                s += (double)p.w[(size_t)o * K + (c * P + py) * P + px] *
                                     p.img[(((size_t)b * ch + c) * S + gy * P + py) * S + gx * P + px];
                    worst = fmax(worst, rel_err(p.out[((size_t)b * NP + gy * G + gx) * C + o], s, REF_FLOOR));
                }
    CHECK(worst < REF_TOL, "patch_forward vs direct convolution: max rel err %.1e (tol %.0e)", worst, REF_TOL);
    float *dw = zero_buf((size_t)C * K), *db = zero_buf(C), *dw2 = zero_buf((size_t)C * K), *db2 = zero_buf(C);
    ops->patch_backward(dw, db, p.R, p.img, B, ch, S, P, C);
    double ew = fd_check(patch_obj, &p, p.w, dw, (size_t)C * K), eb = fd_check(patch_obj, &p, p.b, db, C);
    CHECK(ew < FD_TOL, "patch_backward dw vs finite differences: max rel err %.1e (tol %.0e)", ew, FD_TOL);
    CHECK(eb < FD_TOL, "patch_backward db vs finite differences: max rel err %.1e (tol %.0e)", eb, FD_TOL);
    ops->patch_backward(dw2, db2, p.R, p.img, B, ch, S, P, C);
    ops->patch_backward(dw2, db2, p.R, p.img, B, ch, S, P, C);
    double a = fmax(accumulate_err(dw, dw2, (size_t)C * K), accumulate_err(db, db2, C));
    CHECK(a < ACC_TOL, "patch_backward accumulates (twice = 2x once): err %.1e", a);
    free(p.out), free(p.img), free(p.w), free(p.b), free(p.R), free(dw), free(db), free(dw2), free(db2);
}

/* ------------------------------------------------------------------ xent */

/* The one-rank chain: the row statistics in one read, then the loss. */
static void xent_chain(float *loss, float *rowmax, float *sumexp, float *target,
                       const float *logits, const int *targets, int N, int V) {
    ops->xent_stats(rowmax, sumexp, target, logits, targets, 0, N, V);
    ops->xent_loss(loss, rowmax, sumexp, target, targets, N);
}

typedef struct { float *logits, *R, *loss, *rowmax, *sumexp, *target; const int *targets; int N, V; } xent_ctx;

static double xent_obj(void *c) {
    xent_ctx *x = c;
    xent_chain(x->loss, x->rowmax, x->sumexp, x->target, x->logits, x->targets, x->N, x->V);
    return dot_r(x->loss, x->R, x->N);
}

/* xent_stats' online sum on rows wider than its blocks of columns (the CPU
 * twin's grain is 1024), where the running max grows and the sum is rescaled,
 * against the double-precision two-pass sum. The max is a plain max: exact.
 * Tolerance of the sum: each exp is within 1 ulp, the block sums and the
 * running sum add at most W + W / 1024 + 1 terms in sequence (Higham's bound
 * for a sum of positive terms: that many units of roundoff, u = 2^-24), and
 * every rescale rounds twice more (its exp and its product): with W = 5000 at
 * most (1024 + 5 + 2 * 5 + 2) u = 6.2e-5 relative, below REF_TOL (1e-4). A
 * sum rescaled the wrong way, or not at all, is off by a factor e^|delta max|
 * (O(1) here). Rows: the max in the first block, in the last, a ramp (the max
 * grows in every block: a rescale each time), a first block of -inf (exps of
 * 0, no NaN from -inf - -inf), all -inf (-inf, 0), a NaN (reaches the sum). */
static void test_xent_online(void) {
    enum { N = 6, W = 5000 };
    float *l = rand_buf((size_t)N * W, 4.0f), *rm = zero_buf(N), *se = zero_buf(N), *tg = zero_buf(N);
    const int targets[N] = {0, W - 1, 2500, 1500, -1, 7};
    l[0 * W + 3] = 30.0f;                                          /* max in the first block */
    l[1 * W + W - 2] = 30.0f;                                      /* max in the last */
    for (int j = 0; j < W; j++) l[2 * W + j] = -10.0f + 20.0f * j / W + 0.1f * l[2 * W + j]; /* ramp */
    for (int j = 0; j < 1200; j++) l[3 * W + j] = -INFINITY;       /* a first block of -inf */
    for (int j = 0; j < W; j++) l[4 * W + j] = -INFINITY;          /* all -inf */
    l[5 * W + 4321] = NAN;
    ops->xent_stats(rm, se, tg, l, targets, 0, N, W);
    double worst = 0.0;
    int max_exact = 1, tgt_exact = 1;
    for (int i = 0; i < 4; i++) {
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < W; j++) mx = fmax(mx, l[i * W + j]);
        for (int j = 0; j < W; j++) s += exp((double)l[i * W + j] - mx);
        max_exact &= rm[i] == (float)mx;
        tgt_exact &= tg[i] == l[i * W + targets[i]];
        worst = fmax(worst, fabs(se[i] - s) / s);
    }
    CHECK(max_exact && tgt_exact && worst < REF_TOL,
          "xent_stats on %d-wide rows (max first, last, growing in every block, after -inf): exact max and "
          "target, sum of exps vs double two-pass: max rel err %.1e (tol %.0e)", W, worst, REF_TOL);
    CHECK(rm[4] == -INFINITY && se[4] == 0.0f && tg[4] == 0.0f && isnan(se[5]),
          "xent_stats: a row of -inf gives (-inf, 0, 0) (ignored target); a NaN reaches the sum (%g, %g, %g; %g)",
          rm[4], se[4], tg[4], se[5]);
    free(l), free(rm), free(se), free(tg);
}

/* Vocab-parallel over fake ranks, as tp.c's head: each rank's xent_stats
 * over its columns, the maxima all-reduced (max), each rank's sums rescaled
 * to the global max (xent_rescale), sums and targets all-reduced (sum). */
static void xent_split(const float *logits, const int *targets, int N, int V, int ranks, const int *v0s,
                       const int *vls, float *gmax, float *gsum, float *gtgt) {
    for (int i = 0; i < N; i++) gmax[i] = -INFINITY, gsum[i] = 0.0f, gtgt[i] = 0.0f;
    float *rmax = malloc((size_t)ranks * N * sizeof(float)), *sexp = malloc((size_t)ranks * N * sizeof(float));
    float *tgt = malloc((size_t)ranks * N * sizeof(float));
    for (int r = 0; r < ranks; r++) {
        float *sh = malloc(((size_t)N * vls[r] + 1) * sizeof(float));
        for (int i = 0; i < N; i++)
            memcpy(sh + (size_t)i * vls[r], logits + (size_t)i * V + v0s[r], (size_t)vls[r] * sizeof(float));
        ops->xent_stats(rmax + r * N, sexp + r * N, tgt + r * N, sh, targets, v0s[r], N, vls[r]);
        for (int i = 0; i < N; i++) gmax[i] = fmaxf(gmax[i], rmax[r * N + i]); /* all-reduce max */
        free(sh);
    }
    for (int r = 0; r < ranks; r++) {
        ops->xent_rescale(sexp + r * N, rmax + r * N, gmax, N);
        for (int i = 0; i < N; i++) gsum[i] += sexp[r * N + i], gtgt[i] += tgt[r * N + i]; /* all-reduce sum */
    }
    free(rmax), free(sexp), free(tgt);
}

static void test_xent(void) {
    enum { N = 6, V = 11, V0 = 5 };
    static const int targets[N] = {3, 10, -1, 0, 5, 7}; /* row 2 ignored; both shards hit */
    xent_ctx x = {rand_buf(N * V, 4), rand_buf(N, 1), zero_buf(N), zero_buf(N), zero_buf(N), zero_buf(N), targets, N, V};
    x.logits[V + 4] += 60.0f; /* a large logit: the max shift must prevent overflow */
    xent_obj(&x);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double ref = 0.0;
        if (targets[i] >= 0) {
            double mx = -INFINITY, s = 0.0;
            for (int j = 0; j < V; j++) mx = fmax(mx, x.logits[i * V + j]);
            for (int j = 0; j < V; j++) s += exp(x.logits[i * V + j] - mx);
            ref = log(s) + mx - x.logits[i * V + targets[i]];
        }
        worst = fmax(worst, rel_err(x.loss[i], ref, REF_FLOOR));
    }
    CHECK(worst < REF_TOL && x.loss[2] == 0.0f, "xent loss vs double log-sum-exp (ignored row 0): max rel err %.1e (tol %.0e)",
          worst, REF_TOL);

    float *dlogits = rand_buf(N * V, 1); /* garbage: backward overwrites */
    ops->xent_backward(dlogits, x.logits, x.rowmax, x.sumexp, targets, x.R, 0, N, V);
    double e = fd_check(xent_obj, &x, x.logits, dlogits, N * V);
    CHECK(e < FD_TOL, "xent_backward dlogits vs finite differences: max rel err %.1e (tol %.0e)", e, FD_TOL);
    int zero_row = 1;
    for (int j = 0; j < V; j++) zero_row &= dlogits[2 * V + j] == 0.0f;
    CHECK(zero_row, "xent_backward: ignored row has zero gradient");

    /* vocab-parallel over 2 fake ranks, columns [0,V0) and [V0,V), and over 3
     * with an empty one (V_l = 0: (-inf, 0) rescales to 0). The rank whose
     * max is the row's keeps its sum's bits (xent_rescale by 0 is exact); the
     * other's sum takes two roundings more (an exp, a product), the loss one
     * more addition: 1e-6 relative, a few units of roundoff. */
    xent_obj(&x);
    float gmax[N], gsum[N], gtgt[N], gloss[N], dsh[2][N * V];
    int v0s[3] = {0, V0, V}, vls[3] = {V0, V - V0, 0};
    for (int ranks = 2; ranks <= 3; ranks++) {
        xent_split(x.logits, targets, N, V, ranks, v0s, vls, gmax, gsum, gtgt);
        ops->xent_loss(gloss, gmax, gsum, gtgt, targets, N);
        double el = max_rel_err_f(gloss, x.loss, N, REF_FLOOR), es = max_rel_err_f(gsum, x.sumexp, N, 0.0);
        CHECK(el < 1e-6 && es < 1e-6 && !memcmp(gmax, x.rowmax, sizeof gmax) && !memcmp(gtgt, x.target, sizeof gtgt),
              "xent vocab-parallel (%d shards%s) equals unsplit: the same max and target, sum of exps within "
              "%.1e, loss %.1e (tol 1e-6)", ranks, ranks == 3 ? ", one empty" : "", es, el);
    }
    float *dfull = zero_buf(N * V);
    ops->xent_backward(dfull, x.logits, x.rowmax, x.sumexp, targets, x.R, 0, N, V);
    for (int r = 0; r < 2; r++) {
        float sh[N * V];
        for (int i = 0; i < N; i++) memcpy(sh + i * vls[r], x.logits + i * V + v0s[r], vls[r] * sizeof(float));
        ops->xent_backward(dsh[r], sh, gmax, gsum, targets, x.R, v0s[r], N, vls[r]);
    }
    double ed = 0.0;
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < vls[r]; j++)
                ed = fmax(ed, rel_err(dsh[r][i * vls[r] + j], dfull[i * V + v0s[r] + j], REF_FLOOR));
    CHECK(ed < 1e-6, "xent vocab-parallel dlogits concatenate to unsplit: max rel err %.1e (tol 1e-6)", ed);
    /* xent_rescale: exact where the maxima are equal (-inf included), 0 from -inf */
    float s3[3] = {1.5f, 0.0f, 2.0f}, from[3] = {2.0f, -INFINITY, -INFINITY}, to[3] = {2.0f, -INFINITY, 1.0f};
    ops->xent_rescale(s3, from, to, 3);
    CHECK(s3[0] == 1.5f && s3[1] == 0.0f && s3[2] == 0.0f,
          "xent_rescale: the same max keeps the sum's bits, -inf to -inf stays 0, -inf to 1 gives 0 (%g %g %g)",
          s3[0], s3[1], s3[2]);
    /* in place (ops.h; the chunked LM head turns a chunk's logits into their
     * gradient in one buffer): bitwise the separate buffer's gradient */
    float *inplace = malloc(N * V * sizeof(float));
    memcpy(inplace, x.logits, N * V * sizeof(float));
    ops->xent_backward(inplace, inplace, x.rowmax, x.sumexp, targets, x.R, 0, N, V);
    CHECK(!memcmp(inplace, dfull, N * V * sizeof(float)), "xent_backward in place (dlogits = logits) writes the "
          "same bits as into another buffer");
    free(inplace);
    free(dfull), free(dlogits), free(x.logits), free(x.R), free(x.loss), free(x.rowmax), free(x.sumexp), free(x.target);
    test_xent_online();
}

/* ------------------------------------------------------ optimizer helpers */

static void test_adamw(void) {
    size_t n = 1000;
    float *p = rand_buf(n, 1), *m = zero_buf(n), *v = zero_buf(n);
    double *rp = malloc(n * sizeof(double)), *rm = calloc(n, sizeof(double)), *rv = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) rp[i] = p[i];
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    double worst = 0.0;
    for (int t = 1; t <= 5; t++) {
        float *g = rand_buf(n, 1);
        ops->adamw(p, g, m, v, n, lr, b1, b2, eps, wd, t);
        for (size_t i = 0; i < n; i++) {
            rm[i] = b1 * rm[i] + (1 - (double)b1) * g[i];
            rv[i] = b2 * rv[i] + (1 - (double)b2) * (double)g[i] * g[i];
            double mhat = rm[i] / (1 - pow(b1, t)), vhat = rv[i] / (1 - pow(b2, t));
            rp[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * rp[i]);
        }
        free(g);
    }
    worst = max_rel_err_d(p, rp, n, REF_FLOOR);
    CHECK(worst < REF_TOL, "adamw 5 steps vs double scalar reference: max rel err %.1e (tol %.0e)", worst, REF_TOL);
    free(p), free(m), free(v), free(rp), free(rm), free(rv);
}

static void test_reduce(void) {
    size_t n = 300001; /* odd, threaded */
    float *p = rand_buf(n, 1);
    double ref = 0.0;
    for (size_t i = 0; i < n; i++) ref += (double)p[i] * p[i];
    double s = ops->sumsq(p, n);
    CHECK(fabs(s - ref) <= 1e-12 * ref, "sumsq n=%zu vs serial double: rel err %.1e", n, fabs(s - ref) / ref);
    CHECK(ops->sumsq(p, n) == s, "sumsq is reproducible call to call");
    float *q = malloc(n * sizeof(float));
    memcpy(q, p, n * sizeof(float));
    ops->scale(q, -0.5f, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= q[i] == p[i] * -0.5f;
    CHECK(ok, "scale multiplies every element");
    free(p), free(q);
}

static void test_memory(void) {
    float *a = ops->alloc(1000 * sizeof(float));
    int ok = a != NULL && ((uintptr_t)a % 64) == 0;
    for (int i = 0; ok && i < 1000; i++) ok &= a[i] == 0.0f;
    CHECK(ok, "alloc returns zeroed, 64-byte aligned memory");
    float src[1000];
    for (int i = 0; i < 1000; i++) src[i] = (float)i;
    ops->from_host(a, src, sizeof src);
    float back[1000];
    ops->to_host(back, a, sizeof back);
    CHECK(memcmp(back, src, sizeof src) == 0, "from_host then to_host round-trips");
    ops->zero(a, sizeof src);
    ops->to_host(back, a, sizeof back);
    CHECK(back[0] == 0.0f && back[999] == 0.0f, "zero clears");
    void *z = ops->alloc(0);
    CHECK(z != NULL, "alloc(0) is not a failure");
    ops->free(z);
    ops->free(a);
}

/* ---------------------------------------------------------------- bf16 */

/* The conversions are checked bit for bit: against a reference that rounds in
 * double arithmetic (no bit tricks, so it shares no code or idea with the
 * kernel's "add 0x7fff + lsb"), on every bf16 pattern, on random fp32 bit
 * patterns (every exponent, denormals, infinities and NaNs included), on whole
 * binades of fp32 patterns and on hand-worked edge cases. */

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
static int is_nan16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

/* bf16(x) for a non-NaN float: the two bf16 neighbours of |x| are consecutive
 * multiples of ulp = 2^(E-7), where 2^E <= |x| < 2^(E+1) (E clamped to -126
 * below the normal range: bf16 denormals are multiples of 2^-133), so
 * q = |x| / ulp (exact: a power-of-two scaling in double) lies between them;
 * take the nearer, on a tie the even multiple (= the even mantissa, in the
 * normal and the denormal range alike). A result above the largest finite
 * bf16, 255 * 2^120, is Inf (IEEE: overflow after rounding). */
static uint16_t ref_bf16(float x) {
    if (x == 0.0f || isinf(x)) return (uint16_t)(f2u(x) >> 16); /* exact */
    double a = fabs((double)x);
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int E = e - 1 < -126 ? -126 : e - 1;
    double ulp = ldexp(1.0, E - 7), q = a / ulp, lo = floor(q), frac = q - lo;
    double k = frac > 0.5 ? lo + 1 : frac < 0.5 ? lo : (fmod(lo, 2.0) == 0.0 ? lo : lo + 1);
    double r = k * ulp;
    float rf = r > ldexp(255.0, 120) ? INFINITY : (float)r; /* (float)r is exact */
    return (uint16_t)(f2u(signbit(x) ? -rf : rf) >> 16);
}

/* Kernel output h for input x against the reference: equal bits, or for a NaN
 * a NaN with x's sign and the quiet bit set. */
static int bf16_ok(uint16_t h, float x) {
    if (isnan(x)) return is_nan16(h) && (h & 0x0040u) && (h >> 15) == (f2u(x) >> 31);
    return h == ref_bf16(x);
}

/* ops->to_bf16 over n inputs checked against the reference; returns mismatches
 * and reports the first. */
static size_t check_to_bf16(const float *x, size_t n, const char *what) {
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    ops->to_bf16(h, x, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!bf16_ok(h[i], x[i]) && bad++ == 0)
            printf("# %s: first mismatch at %zu: 0x%08x -> 0x%04x, reference 0x%04x\n", what, i,
                   f2u(x[i]), h[i], ref_bf16(x[i]));
    free(h);
    return bad;
}

static uint32_t rand_u32(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

static void test_bf16_roundtrip(void) {
    size_t n = 65536;
    uint16_t *h = malloc(n * sizeof *h), *h2 = malloc(n * sizeof *h2);
    float *f = malloc(n * sizeof *f), *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) h[i] = (uint16_t)i;
    ops->from_bf16(f, h, n);
    size_t inexact = 0;
    for (size_t i = 0; i < n; i++) inexact += f2u(f[i]) != (uint32_t)h[i] << 16;
    CHECK(inexact == 0, "from_bf16 widens all 65536 bf16 patterns exactly (bits << 16): %zu wrong", inexact);
    ops->to_bf16(h2, f, n);
    memcpy(g, f, n * sizeof *g);
    ops->round_bf16(g, n);
    size_t bad = 0, nans = 0, bad_round = 0;
    for (size_t i = 0; i < n; i++) {
        /* a signalling NaN (quiet bit clear) comes back quieted; every other
         * pattern, quiet NaNs included, comes back as it was */
        uint16_t want = is_nan16(h[i]) ? (uint16_t)(h[i] | 0x0040u) : h[i];
        nans += is_nan16(h[i]);
        if (h2[i] != want && bad++ == 0) printf("# round trip: 0x%04x -> 0x%04x\n", h[i], h2[i]);
        bad_round += f2u(g[i]) != (uint32_t)want << 16;
    }
    CHECK(bad == 0, "to_bf16(from_bf16(h)) == h for all 65536 patterns (%zu NaNs stay NaN, "
          "signalling ones quieted): %zu wrong", nans, bad);
    CHECK(bad_round == 0, "round_bf16 leaves every bf16-representable float unchanged: %zu wrong", bad_round);
    free(h), free(h2), free(f), free(g);
}

typedef struct { uint32_t in; uint16_t out; const char *what; } bf16_case;

static void test_bf16_edges(void) {
    static const bf16_case cases[] = {
        {0x3f808000u, 0x3f80, "1 + 2^-8, a tie: down to the even 1.0"},
        {0x3f818000u, 0x3f82, "1 + 3*2^-8, a tie: up to the even mantissa"},
        {0xbf818000u, 0xbf82, "-(1 + 3*2^-8), a tie: away from zero to the even mantissa"},
        {0x3f807fffu, 0x3f80, "just below a tie: down"},
        {0x3f808001u, 0x3f81, "just above a tie: up"},
        {0x3f7fffffu, 0x3f80, "1 - 2^-24: up across the binade to 1.0"},
        {0x7f7f0000u, 0x7f7f, "the largest finite bf16 (3.39e38) stays"},
        {0x7f7f7fffu, 0x7f7f, "just below the tie past the largest finite bf16: stays finite"},
        {0x7f7f8000u, 0x7f80, "the tie past the largest finite bf16 (odd mantissa): +Inf"},
        {0x7f7fffffu, 0x7f80, "FLT_MAX: +Inf"},
        {0xff7f8000u, 0xff80, "minus the tie past the largest finite bf16: -Inf"},
        {0x7f800000u, 0x7f80, "+Inf"},
        {0xff800000u, 0xff80, "-Inf"},
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0 keeps its sign"},
        {0x00000001u, 0x0000, "the smallest fp32 denormal: +0"},
        {0x80000001u, 0x8000, "minus the smallest fp32 denormal: -0"},
        {0x00008000u, 0x0000, "denormal tie: down to the even 0"},
        {0x00018000u, 0x0002, "denormal tie: up to the even 2^-132"},
        {0x00008001u, 0x0001, "just above a denormal tie: the smallest bf16 denormal 2^-133"},
        {0x007f7fffu, 0x007f, "the largest bf16 denormal"},
        {0x007fffffu, 0x0080, "the largest fp32 denormal: up to the smallest normal 2^-126"},
        {0x00800000u, 0x0080, "the smallest normal"},
        {0x7fc00000u, 0x7fc0, "quiet NaN"},
        {0xffc00001u, 0xffc0, "negative quiet NaN keeps its sign"},
        {0x7f800001u, 0x7fc0, "NaN with payload only in the low half: NaN, not Inf"},
        {0x7fbfffffu, 0x7fff, "signalling NaN: quieted, top payload bits kept"},
        {0x7fffffffu, 0x7fff, "all-ones NaN: NaN (adding 0x7fff would carry into the sign)"},
    };
    size_t n = sizeof cases / sizeof cases[0];
    float x[sizeof cases / sizeof cases[0]];
    uint16_t h[sizeof cases / sizeof cases[0]];
    for (size_t i = 0; i < n; i++) x[i] = u2f(cases[i].in);
    ops->to_bf16(h, x, n);
    for (size_t i = 0; i < n; i++) {
        int ref_agrees = isnan(x[i]) || ref_bf16(x[i]) == cases[i].out;
        CHECK(h[i] == cases[i].out && ref_agrees, "to_bf16 0x%08x -> 0x%04x (want 0x%04x%s): %s",
              cases[i].in, h[i], cases[i].out, ref_agrees ? "" : ", and the reference disagrees",
              cases[i].what);
    }
}

static void test_bf16_random(void) {
    /* random fp32 bit patterns: every exponent, sign, denormal, Inf and NaN */
    size_t n = (size_t)1 << 22;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = u2f(rand_u32());
    size_t bad = check_to_bf16(x, n, "random bit patterns");
    CHECK(bad == 0, "to_bf16 on %zu random fp32 bit patterns = double-precision reference: %zu wrong", n, bad);
    /* random values as a network holds them, and products of them */
    for (size_t i = 0; i < n; i++) x[i] = frand() * (i & 1 ? 1.0f : 1e-3f) * (i & 2 ? frand() * 64.0f : 1.0f);
    bad = check_to_bf16(x, n, "random values");
    CHECK(bad == 0, "to_bf16 on %zu random values in (-64, 64) = reference: %zu wrong", n, bad);
    /* every low half under chosen high halves: all roundings, ties and
     * carries of those binades (denormal, smallest normal, 1.0, the top
     * finite bf16, Inf/NaN, and negatives) */
    static const uint16_t tops[] = {0x0000, 0x0001, 0x007f, 0x0080, 0x3f80, 0x3f81, 0x3fff,
                                    0x7f7e, 0x7f7f, 0x7f80, 0x7fbf, 0x7fff, 0x8000, 0x807f, 0xbf80, 0xff7f, 0xff80};
    size_t nt = sizeof tops / sizeof tops[0];
    float *y = malloc(nt * 65536 * sizeof *y);
    for (size_t t = 0; t < nt; t++)
        for (uint32_t lo = 0; lo < 65536; lo++) y[t * 65536 + lo] = u2f((uint32_t)tops[t] << 16 | lo);
    bad = check_to_bf16(y, nt * 65536, "whole binades");
    CHECK(bad == 0, "to_bf16 on all 65536 low halves under %zu high halves (denormal, normal, "
          "largest finite, Inf/NaN, negative) = reference: %zu wrong", nt, bad);

    /* round_bf16 in place = from_bf16(to_bf16(x)), bit for bit; an odd
     * length above the threading threshold, then a short one */
    for (size_t i = 0; i < n; i++) x[i] = u2f(rand_u32());
    size_t sizes[2] = {n - 1, 7};
    for (int s = 0; s < 2; s++) {
        size_t m = sizes[s];
        float *r = malloc(m * sizeof *r), *w = malloc(m * sizeof *w);
        uint16_t *h = malloc(m * sizeof *h);
        memcpy(r, x, m * sizeof *r);
        ops->round_bf16(r, m);
        ops->to_bf16(h, x, m);
        ops->from_bf16(w, h, m);
        CHECK(memcmp(r, w, m * sizeof *r) == 0, "round_bf16 (in place) n=%zu = from_bf16(to_bf16(x)) bit for bit", m);
        free(r), free(w), free(h);
    }
    free(x), free(y);
}

static void test_bf16_acc(void) {
    size_t n = 300001; /* odd, threaded */
    uint16_t *acc = malloc(n * sizeof *acc), *want = malloc(n * sizeof *want);
    float *add = malloc(n * sizeof *add), *sum = malloc(n * sizeof *sum), *a0 = malloc(n * sizeof *a0);
    for (size_t i = 0; i < n; i++) {
        float a = frand() * (i % 3 == 0 ? 100.0f : 1.0f);
        acc[i] = ref_bf16(a);
        /* adds from comparable down to far below the accumulator's half ulp,
         * where bf16 accumulation stalls */
        add[i] = frand() * ldexpf(1.0f, -(int)(i % 16));
    }
    /* edge cases: ties, cancellation to +0, overflow to Inf, Inf - Inf, NaN */
    const struct { uint16_t acc; float add; } e[] = {
        {0x3f80, 0x1p-8f}, {0x3f81, 0x1p-8f}, {0x3f80, 0x1p-9f}, {0x3f80, -1.0f}, {0x7f7f, 0x1p120f},
        {0x7f7f, 0x1p119f}, {0xff7f, -0x1p120f}, {0x7f80, -INFINITY}, {0x7fc0, 1.0f}, {0x3f80, NAN},
        {0x0001, 0x1p-133f}, {0x8000, 0.0f},
    };
    size_t ne = sizeof e / sizeof e[0];
    for (size_t i = 0; i < ne; i++) acc[i] = e[i].acc, add[i] = e[i].add;
    /* expected through the other ops: to_bf16(from_bf16(acc) + add) */
    ops->from_bf16(a0, acc, n);
    for (size_t i = 0; i < n; i++) sum[i] = a0[i] + add[i];
    ops->to_bf16(want, sum, n);
    ops->acc_bf16(acc, add, n);
    size_t bad = 0, bad_ref = 0, stalled = 0;
    for (size_t i = 0; i < n; i++) {
        if (acc[i] != want[i] && bad++ == 0)
            printf("# acc_bf16 at %zu: 0x%04x + %a -> 0x%04x, want 0x%04x\n", i, f2u(a0[i]) >> 16, add[i], acc[i], want[i]);
        bad_ref += !bf16_ok(acc[i], sum[i]);
        stalled += add[i] != 0.0f && acc[i] == f2u(a0[i]) >> 16;
    }
    CHECK(bad == 0, "acc_bf16 n=%zu = to_bf16(from_bf16(acc) + add) bit for bit: %zu wrong", n, bad);
    CHECK(bad_ref == 0, "acc_bf16 n=%zu = double-precision reference of the fp32 sum: %zu wrong "
          "(%zu adds lost to rounding, as bf16 accumulation does)", n, bad_ref, stalled);
    uint16_t edge_want[] = {0x3f80, 0x3f82, 0x3f80, 0x0000, 0x7f80, 0x7f80, 0xff80};
    int edges_ok = 1;
    for (size_t i = 0; i < sizeof edge_want / sizeof edge_want[0]; i++) edges_ok &= acc[i] == edge_want[i];
    for (size_t i = 7; i < 10; i++) edges_ok &= is_nan16(acc[i]);
    edges_ok &= acc[10] == 0x0002 && acc[11] == 0x0000; /* -0 + +0 = +0 */
    CHECK(edges_ok, "acc_bf16 edges: 1+2^-8 -> 1 and 1+2^-7+2^-8 -> 1+2^-6 (ties to even), 1+2^-9 -> 1 "
          "(stalls), 1-1 -> +0, largest finite + half ulp -> Inf, Inf-Inf and NaN -> NaN, denormals add exactly");
    uint16_t small[3] = {0x3f80, 0x4000, 0xc040};
    float sadd[3] = {1.0f, 0.5f, 1.0f};
    ops->acc_bf16(small, sadd, 3);
    CHECK(small[0] == 0x4000 && small[1] == 0x4020 && small[2] == 0xc000,
          "acc_bf16 n=3 (unthreaded): 1+1=2, 2+0.5=2.5, -3+1=-2");
    free(acc), free(want), free(add), free(sum), free(a0);
}

static void test_bf16(void) {
    test_bf16_roundtrip();
    test_bf16_edges();
    test_bf16_random();
    test_bf16_acc();
}

/* Every op with zero rows / elements (and NULL for the buffers that would be
 * empty) must return without touching memory or printing BLAS errors. */
static void test_empty(void) {
    float w[12] = {0}, b[4] = {0};
    int tok = 0;
    ops->embedding_forward(NULL, NULL, w, 0, 3, 0, 4);
    ops->embedding_backward(w, NULL, NULL, 0, 3, 0, 4);
    ops->posadd_forward(NULL, w, NULL, 0, 3, 4);
    ops->posadd_backward(w, NULL, NULL, 0, 3, 4);
    ops->patch_forward(NULL, NULL, w, b, 0, 3, 2, 2, 1);
    ops->patch_backward(w, b, NULL, NULL, 0, 3, 2, 2, 1);
    ops->layernorm_forward(NULL, NULL, NULL, NULL, w, b, 0, 4, 1e-5f, DT_F32);
    ops->layernorm_backward(NULL, w, b, NULL, NULL, w, NULL, NULL, 0, 4, DT_F32);
    ops->matmul_forward(NULL, NULL, w, b, 0, 3, 4, DT_F32, DT_F32);
    ops->matmul_backward(NULL, w, b, NULL, NULL, w, 0, 3, 4, DT_F32);
    ops->attention_forward(NULL, NULL, NULL, 0, 4, 8, 2, 2, 1, DT_F32);
    ops->attention_backward(NULL, NULL, NULL, NULL, NULL, 0, 4, 8, 2, 2, 1, DT_F32);
    ops->rmsnorm_forward(NULL, NULL, NULL, w, 0, 4, 1e-5f, DT_F32);
    ops->rmsnorm_backward(NULL, w, NULL, NULL, w, NULL, 0, 4, DT_F32);
    ops->residual_rmsnorm_forward(NULL, NULL, NULL, NULL, NULL, w, 0, 4, 1e-5f, DT_F32);
    ops->swiglu_forward(NULL, NULL, 0, 4, DT_F32);
    ops->swiglu_backward(NULL, NULL, NULL, 0, 4, DT_F32);
    ops->rope_table(NULL, 0, 4, 10000.0f);
    ops->rope_forward(NULL, 8, 2, 4, NULL, NULL, 0, DT_F32);
    ops->rope_backward(NULL, 8, 2, 4, NULL, NULL, 0);
    ops->attention_decode(NULL, NULL, NULL, NULL, 0, 8, 2, 1, DT_F32);
    ops->gelu_forward(NULL, NULL, 0, DT_F32);
    ops->gelu_backward(NULL, NULL, NULL, 0, DT_F32);
    ops->gelu_erf_forward(NULL, NULL, 0, DT_F32);
    ops->gelu_erf_backward(NULL, NULL, NULL, 0, DT_F32);
    ops->residual_forward(NULL, NULL, NULL, 0, DT_F32);
    ops->residual_backward(NULL, NULL, NULL, 0);
    ops->xent_stats(NULL, NULL, NULL, NULL, NULL, 0, 0, 5);
    ops->xent_rescale(NULL, NULL, NULL, 0);
    ops->xent_loss(NULL, NULL, NULL, NULL, NULL, 0);
    ops->xent_backward(NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 5);
    ops->adamw(NULL, NULL, NULL, NULL, 0, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
    ops->scale(NULL, 2.0f, 0);
    double s = ops->sumsq(NULL, 0);
    ops->zero(NULL, 0);
    ops->copy(NULL, NULL, 0);
    ops->to_bf16(NULL, NULL, 0);
    ops->from_bf16(NULL, NULL, 0);
    ops->round_bf16(NULL, 0);
    ops->acc_bf16(NULL, NULL, 0);
    int untouched = 1;
    for (int i = 0; i < 12; i++) untouched &= w[i] == 0.0f;
    for (int i = 0; i < 4; i++) untouched &= b[i] == 0.0f;
    CHECK(s == 0.0 && untouched && tok == 0, "every op with 0 rows/elements is a harmless no-op");
}

/* ------------------------------------------------------------- benchmark */

/* Best of BENCH_REPS timings (the machine is shared; the minimum is the
 * least disturbed). Reported, not asserted. */
#define BENCH_REPS 7

static void bench(void) {
    int N = 1024, IC = 256, OC = 768;
    float *inp = rand_buf((size_t)N * IC, 1), *w = rand_buf((size_t)OC * IC, 1), *b = rand_buf(OC, 1);
    float *out = zero_buf((size_t)N * OC), *dinp = zero_buf((size_t)N * IC), *dw = zero_buf((size_t)OC * IC);
    float *db = zero_buf(OC);
    double tf = 1e9, tb = 1e9;
    for (int r = 0; r < BENCH_REPS; r++) {
        double t0 = now_s();
        ops->matmul_forward(out, inp, w, b, N, IC, OC, DT_F32, DT_F32);
        double t1 = now_s();
        ops->matmul_backward(dinp, dw, db, out, inp, w, N, IC, OC, DT_F32);
        double t2 = now_s();
        tf = fmin(tf, t1 - t0), tb = fmin(tb, t2 - t1);
    }
    double fl = 2.0 * N * IC * OC;
    printf("# bench matmul N=%d IC=%d OC=%d: forward %.2f ms (%.1f GFLOP/s), backward %.2f ms (%.1f GFLOP/s)\n",
           N, IC, OC, tf * 1e3, fl / tf * 1e-9, tb * 1e3, 2 * fl / tb * 1e-9);
    free(inp), free(w), free(b), free(out), free(dinp), free(dw), free(db);

    int B = 4, T = 256, C = 256, NH = 4;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = rand_buf(nqkv, 1), *o = zero_buf(nout), *att = zero_buf(natt), *dout = rand_buf(nout, 1);
    float *dqkv = zero_buf(nqkv), *scratch = zero_buf(natt);
    for (int causal = 1; causal >= 0; causal--) {
        tf = 1e9, tb = 1e9;
        for (int r = 0; r < BENCH_REPS; r++) {
            double t0 = now_s();
            ops->attention_forward(o, att, qkv, B, T, C, NH, NH, causal, DT_F32);
            double t1 = now_s();
            ops->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, NH, causal, DT_F32);
            double t2 = now_s();
            tf = fmin(tf, t1 - t0), tb = fmin(tb, t2 - t1);
        }
        /* useful FLOPs: QK^T and AV (2*T*T*hs each per head), half when causal */
        double afl = 4.0 * B * NH * (double)T * T * (C / NH) * (causal ? 0.5 : 1.0);
        printf("# bench attention B=%d T=%d C=%d NH=%d %s: forward %.2f ms (%.1f GFLOP/s), backward %.2f ms (%.1f GFLOP/s)\n",
               B, T, C, NH, causal ? "causal" : "full", tf * 1e3, afl / tf * 1e-9, tb * 1e3, 2 * afl / tb * 1e-9);
    }
    free(qkv), free(o), free(att), free(dout), free(dqkv), free(scratch);
}

/* The activations' type (ops.h dt_dtype): an op on bf16 activations is the
 * fp32 op on their widened values with its stored results rounded once, bit
 * for bit — the contract the CUDA kernels are held to and the reason a bf16
 * model gives the same bits whether its tensors are stored as bf16 or as
 * fp32 arrays of bf16 values. */
static uint16_t *bf16_of(const float *f, size_t n) {
    uint16_t *h = malloc((n ? n : 1) * sizeof(uint16_t));
    ops->to_bf16(h, f, n);
    return h;
}

static float *widened(const uint16_t *h, size_t n) {
    float *f = malloc((n ? n : 1) * sizeof(float));
    ops->from_bf16(f, h, n);
    return f;
}

/* bf16 result h (n) == round_bf16 of the fp32 result f */
static int same_rounded(const uint16_t *h, float *f, size_t n) {
    ops->round_bf16(f, n);
    float *w = widened(h, n);
    int same = memcmp(w, f, n * sizeof(float)) == 0;
    free(w);
    return same;
}

static void test_act_bf16(void) {
    int N = 6, C = 32, F = 64, NH = 4, T = 3, B = 2; /* N = B T */
    size_t nc = (size_t)N * C, nf = (size_t)N * F, n3 = 3 * nc;
    float *xs = rand_buf(nc, 2.0f), *w = rand_buf((size_t)F * C, 0.5f), *bias = rand_buf((size_t)F, 0.5f);
    float *lw = rand_buf((size_t)C, 1.0f), *lb = rand_buf((size_t)C, 1.0f);
    uint16_t *x16 = bf16_of(xs, nc), *w16 = bf16_of(w, (size_t)F * C); /* weights are of the type too */
    float *x = widened(x16, nc), *wf = widened(w16, (size_t)F * C); /* the same values in fp32 */
    float *mean = zero_buf((size_t)N), *rstd = zero_buf((size_t)N), *m2 = zero_buf((size_t)N), *r2 = zero_buf((size_t)N);
    float *o32 = zero_buf(nf), *p32 = zero_buf(nf);
    uint16_t *o16 = calloc(nf, 2), *p16 = calloc(nf, 2);

    ops->layernorm_forward(o32, mean, rstd, x, lw, lb, N, C, 1e-5f, DT_F32);
    ops->layernorm_forward(o16, m2, r2, x16, lw, lb, N, C, 1e-5f, DT_BF16);
    CHECK(same_rounded(o16, o32, nc) && !memcmp(mean, m2, N * 4) && !memcmp(rstd, r2, N * 4),
          "layernorm_forward on bf16 = the fp32 op on the widened input, out rounded once (statistics equal)");
    float *g = rand_buf(nc, 1.0f), *d32 = zero_buf(nc), *d16 = zero_buf(nc);
    float *gw = zero_buf((size_t)C), *gb = zero_buf((size_t)C), *gw2 = zero_buf((size_t)C), *gb2 = zero_buf((size_t)C);
    ops->layernorm_backward(d32, gw, gb, g, x, lw, mean, rstd, N, C, DT_F32);
    ops->layernorm_backward(d16, gw2, gb2, g, x16, lw, mean, rstd, N, C, DT_BF16);
    CHECK(!memcmp(d32, d16, nc * 4) && !memcmp(gw, gw2, C * 4) && !memcmp(gb, gb2, C * 4),
          "layernorm_backward reading a bf16 input = reading its widened values");

    ops->matmul_forward(o32, x, wf, bias, N, C, F, DT_F32, DT_F32);
    ops->matmul_forward(o16, x16, w16, bias, N, C, F, DT_BF16, DT_BF16);
    ops->matmul_forward(p32, x16, w16, bias, N, C, F, DT_BF16, DT_F32);
    CHECK(!memcmp(p32, o32, nf * 4) && same_rounded(o16, o32, nf),
          "matmul_forward bf16 input: an fp32 result equal to the fp32 op's, a bf16 one its rounding");
    ops->matmul_gelu_forward(o16, p16, x16, w16, bias, N, C, F, DT_BF16);
    ops->matmul_forward(p32, x, wf, bias, N, C, F, DT_F32, DT_F32);
    ops->gelu_forward(o32, p32, nf, DT_F32);
    CHECK(same_rounded(o16, o32, nf) && same_rounded(p16, p32, nf),
          "matmul_gelu_forward bf16: GELU of the unrounded pre-activation, both rounded once (an epilogue's)");
    float *dy = rand_buf(nf, 1.0f), *dw32 = zero_buf((size_t)F * C), *dw16 = zero_buf((size_t)F * C);
    ops->matmul_backward(NULL, dw32, NULL, dy, x, NULL, N, C, F, DT_F32);
    ops->matmul_backward(NULL, dw16, NULL, dy, x16, NULL, N, C, F, DT_BF16);
    CHECK(!memcmp(dw32, dw16, (size_t)F * C * 4), "matmul_backward dw from a bf16 input = from its widened values");

    uint16_t *pre16 = bf16_of(p32, nf);
    float *pre = widened(pre16, nf), *sc = zero_buf(nf), *e32 = zero_buf(nf), *e16 = zero_buf(nf);
    float *wts = rand_buf((size_t)C * F, 0.5f); /* [C, F]: the layer after the GELU */
    uint16_t *wt16 = bf16_of(wts, (size_t)C * F);
    float *wt = widened(wt16, (size_t)C * F);
    float *dyc = rand_buf(nc, 1.0f);
    ops->matmul_dgelu_backward(e32, sc, dyc, wt, pre, N, F, C, DT_F32);
    ops->matmul_dgelu_backward(e16, sc, dyc, wt16, pre16, N, F, C, DT_BF16);
    CHECK(!memcmp(e32, e16, nf * 4), "matmul_dgelu_backward reading a bf16 pre-activation and weight = their widened values");
    float *di32 = zero_buf(nf), *di16 = zero_buf(nf);
    ops->matmul_backward(di32, NULL, NULL, dyc, NULL, wt, N, F, C, DT_F32);
    ops->matmul_backward(di16, NULL, NULL, dyc, NULL, wt16, N, F, C, DT_BF16);
    CHECK(!memcmp(di32, di16, nf * 4), "matmul_backward dinp from a bf16 weight = from its widened values");
    ops->gelu_erf_forward(o16, pre16, nf, DT_BF16);
    ops->gelu_erf_forward(o32, pre, nf, DT_F32);
    CHECK(same_rounded(o16, o32, nf), "gelu_erf_forward bf16 = fp32 op, rounded once");

    float *a = rand_buf(nc, 1.0f);
    ops->residual_forward(o16, a, x16, nc, DT_BF16);
    ops->residual_forward(o32, a, x, nc, DT_F32);
    CHECK(same_rounded(o16, o32, nc), "residual_forward bf16: bf16(a + b), the sum formed in fp32");
    {
        uint16_t *r16 = calloc(nc, 2), *l16 = calloc(nc, 2), *r16b = calloc(nc, 2), *l16b = calloc(nc, 2);
        float *ma = zero_buf((size_t)N), *ra = zero_buf((size_t)N), *mb = zero_buf((size_t)N), *rb = zero_buf((size_t)N);
        ops->residual_layernorm_forward(r16, l16, ma, ra, a, x16, lw, lb, N, C, 1e-5f, DT_BF16);
        ops->residual_forward(r16b, a, x16, nc, DT_BF16);
        ops->layernorm_forward(l16b, mb, rb, r16b, lw, lb, N, C, 1e-5f, DT_BF16);
        CHECK(!memcmp(r16, r16b, nc * 2) && !memcmp(l16, l16b, nc * 2) && !memcmp(ma, mb, N * 4) &&
                  !memcmp(ra, rb, N * 4),
              "residual_layernorm_forward bf16 = residual_forward then layernorm_forward of the stored sum");
        free(r16); free(l16); free(r16b); free(l16b); free(ma); free(ra); free(mb); free(rb);
    }

    /* attention over qkv [B, T, 3C]: naive (probabilities stored too) and blockwise */
    float *qf = rand_buf(n3, 1.0f);
    uint16_t *qkv16 = bf16_of(qf, n3);
    float *qkv = widened(qkv16, n3);
    size_t na = (size_t)B * NH * T * T;
    float *att32 = zero_buf(na);
    uint16_t *att16 = calloc(na, 2);
    ops->attention_forward(o32, att32, qkv, B, T, C, NH, NH, 1, DT_F32);
    ops->attention_forward(o16, att16, qkv16, B, T, C, NH, NH, 1, DT_BF16);
    int ok = same_rounded(o16, o32, nc) && same_rounded(att16, att32, na);
    CHECK(ok, "attention_forward bf16: out and probabilities the fp32 op's, rounded once");
    float *kv = zero_buf(2 * nc), *lse = zero_buf((size_t)B * NH * T), *lse2 = zero_buf((size_t)B * NH * T);
    uint16_t *kv16 = calloc(2 * nc, 2);
    ops->rows_copy(kv, 2 * C, qkv + C, 3 * C, N, 2 * C, 0, DT_F32);
    ops->rows_copy(kv16, 2 * C, qkv16 + C, 3 * C, N, 2 * C, 0, DT_BF16);
    float *kvw = widened(kv16, 2 * nc);
    CHECK(!memcmp(kvw, kv, 2 * nc * 4), "rows_copy bf16 copies the stored values");
    ops->attention_block_forward(o32, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NH, 1, 0, DT_F32, DT_F32);
    ops->attention_block_forward(o16, lse2, qkv16, kv16, NULL, NULL, B, T, T, T, C, NH, NH, 1, 0, DT_BF16, DT_BF16);
    CHECK(same_rounded(o16, o32, nc) && !memcmp(lse, lse2, (size_t)B * NH * T * 4),
          "attention_block_forward bf16 q, kv -> bf16 out: the fp32 op's out rounded once, lse equal");
    ops->attention_block_forward(o32, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NH, 1, 0, DT_F32, DT_F32);
    uint16_t *out16 = bf16_of(o32, nc);
    float *outw = widened(out16, nc), *dq = zero_buf(n3), *dkv = zero_buf(2 * nc), *dq2 = zero_buf(n3),
          *dkv2 = zero_buf(2 * nc), *dout = rand_buf(nc, 1.0f);
    ops->attention_block_backward(dq, dkv, dout, outw, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NH, 1, 0, DT_F32);
    ops->attention_block_backward(dq2, dkv2, dout, out16, lse, qkv16, kv16, NULL, NULL, B, T, T, T, C, NH, NH, 1, 0, DT_BF16);
    CHECK(!memcmp(dq, dq2, n3 * 4) && !memcmp(dkv, dkv2, 2 * nc * 4),
          "attention_block_backward reading bf16 out, q, kv = reading their widened values");

    free(xs); free(w); free(bias); free(lw); free(lb); free(x16); free(x); free(mean); free(rstd); free(m2); free(r2);
    free(o32); free(p32); free(o16); free(p16); free(g); free(d32); free(d16); free(gw); free(gb); free(gw2); free(gb2);
    free(dy); free(dw32); free(dw16); free(pre16); free(pre); free(sc); free(e32); free(e16); free(wt); free(dyc);
    free(w16); free(wf); free(wts); free(wt16); free(di32); free(di16);
    free(a); free(qf); free(qkv16); free(qkv); free(att32); free(att16); free(kv); free(lse); free(lse2); free(kv16);
    free(kvw); free(out16); free(outw); free(dq); free(dkv); free(dq2); free(dkv2); free(dout);
}

/* The Llama ops on bf16 activations: the fp32 op on the widened values,
 * stored results rounded once (the contract of test_act_bf16 above). */
static void test_llama_bf16(void) {
    int N = 6, C = 32, F = 24, NH = 4, NKV = 2, T = 3, B = 2, hs = C / NH; /* N = B T */
    size_t nc = (size_t)N * C;
    float *xs = rand_buf(nc, 2.0f), *w = rand_buf((size_t)C, 1.0f), *a = rand_buf(nc, 1.0f);
    uint16_t *x16 = bf16_of(xs, nc);
    float *x = widened(x16, nc), *o32 = zero_buf(nc), *r1 = zero_buf(N), *r2 = zero_buf(N);
    uint16_t *o16 = calloc(nc, 2), *res16 = calloc(nc, 2), *res16b = calloc(nc, 2), *o16b = calloc(nc, 2);
    ops->rmsnorm_forward(o32, r1, x, w, N, C, 1e-5f, DT_F32);
    ops->rmsnorm_forward(o16, r2, x16, w, N, C, 1e-5f, DT_BF16);
    CHECK(same_rounded(o16, o32, nc) && !memcmp(r1, r2, N * 4),
          "rmsnorm_forward on bf16 = the fp32 op on the widened input, out rounded once (rstd equal)");
    float *g = rand_buf(nc, 1.0f), *d32 = zero_buf(nc), *d16 = zero_buf(nc), *gw = zero_buf(C), *gw2 = zero_buf(C);
    ops->rmsnorm_backward(d32, gw, g, x, w, r1, N, C, DT_F32);
    ops->rmsnorm_backward(d16, gw2, g, x16, w, r1, N, C, DT_BF16);
    CHECK(!memcmp(d32, d16, nc * 4) && !memcmp(gw, gw2, C * 4), "rmsnorm_backward reading a bf16 input = its widened values");
    ops->residual_rmsnorm_forward(res16, o16, r1, a, x16, w, N, C, 1e-5f, DT_BF16);
    ops->residual_forward(res16b, a, x16, nc, DT_BF16);
    ops->rmsnorm_forward(o16b, r2, res16b, w, N, C, 1e-5f, DT_BF16);
    CHECK(!memcmp(res16, res16b, nc * 2) && !memcmp(o16, o16b, nc * 2) && !memcmp(r1, r2, N * 4),
          "residual_rmsnorm_forward bf16 = residual_forward then rmsnorm_forward of the stored sum");

    /* swiglu: inp [N, 2F] bf16 */
    size_t nf = (size_t)N * F;
    float *gu = rand_buf(2 * nf, 3.0f);
    uint16_t *gu16 = bf16_of(gu, 2 * nf), *s16 = calloc(nf, 2);
    float *guw = widened(gu16, 2 * nf), *s32 = zero_buf(nf), *df = rand_buf(nf, 1.0f);
    ops->swiglu_forward(s32, guw, N, F, DT_F32);
    ops->swiglu_forward(s16, gu16, N, F, DT_BF16);
    CHECK(same_rounded(s16, s32, nf), "swiglu_forward bf16 = the fp32 op, out rounded once");
    float *dg32 = zero_buf(2 * nf), *dg16 = zero_buf(2 * nf);
    ops->swiglu_backward(dg32, guw, df, N, F, DT_F32);
    ops->swiglu_backward(dg16, gu16, df, N, F, DT_BF16);
    CHECK(!memcmp(dg32, dg16, 2 * nf * 4), "swiglu_backward reading bf16 gate, up = their widened values");

    /* rope on a bf16 qkv (GQA: NH + NKV heads rotated, v kept) */
    int W = dt_qkv_cols(C, NH, NKV), pos[6] = {0, 1, 2, 5, 6, 7};
    size_t nq = (size_t)N * W;
    float *cs = zero_buf((size_t)8 * hs), *qf = rand_buf(nq, 1.0f);
    ops->rope_table(cs, 8, hs, 10000.0f);
    uint16_t *q16 = bf16_of(qf, nq);
    float *qw = widened(q16, nq);
    ops->rope_forward(qw, W, NH + NKV, hs, pos, cs, N, DT_F32);
    ops->rope_forward(q16, W, NH + NKV, hs, pos, cs, N, DT_BF16);
    CHECK(same_rounded(q16, qw, nq), "rope_forward bf16 = the fp32 op on the widened values, rounded once (v as stored)");

    /* GQA attention on bf16 qkv (rotated above): naive, blockwise, decode */
    size_t na = (size_t)B * NH * T * T, nkv = (size_t)N * dt_kv_cols(C, NH, NKV);
    int C2 = dt_kv_cols(C, NH, NKV);
    float *qkv = widened(q16, nq), *att32 = zero_buf(na), *kv = zero_buf(nkv), *lse = zero_buf((size_t)B * NH * T);
    float *lse2 = zero_buf((size_t)B * NH * T);
    uint16_t *att16 = calloc(na, 2), *kv16 = calloc(nkv, 2);
    ops->attention_forward(o32, att32, qkv, B, T, C, NH, NKV, 1, DT_F32);
    ops->attention_forward(o16, att16, q16, B, T, C, NH, NKV, 1, DT_BF16);
    CHECK(same_rounded(o16, o32, nc) && same_rounded(att16, att32, na),
          "attention_forward NKV=%d bf16: out and probabilities the fp32 op's, rounded once", NKV);
    ops->rows_copy(kv, C2, qkv + C, W, N, C2, 0, DT_F32);
    ops->rows_copy(kv16, C2, q16 + C, W, N, C2, 0, DT_BF16);
    ops->attention_block_forward(o32, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NKV, 1, 0, DT_F32, DT_F32);
    ops->attention_block_forward(o16, lse2, q16, kv16, NULL, NULL, B, T, T, T, C, NH, NKV, 1, 0, DT_BF16, DT_BF16);
    CHECK(same_rounded(o16, o32, nc) && !memcmp(lse, lse2, (size_t)B * NH * T * 4),
          "attention_block_forward NKV=%d bf16: the fp32 op's out rounded once, lse equal", NKV);
    float *dec32 = zero_buf((size_t)C), *scr = zero_buf((size_t)NH * T);
    uint16_t *dec16 = calloc((size_t)C, 2);
    ops->attention_decode(dec32, scr, qkv + (size_t)(T - 1) * W, kv, T, C, NH, NKV, DT_F32);
    ops->attention_decode(dec16, scr, q16 + (size_t)(T - 1) * W, kv16, T, C, NH, NKV, DT_BF16);
    CHECK(same_rounded(dec16, dec32, (size_t)C), "attention_decode NKV=%d bf16 q and cache: the fp32 op's out rounded once",
          NKV);
    free(xs), free(w), free(a), free(x16), free(x), free(o32), free(r1), free(r2), free(o16), free(res16),
        free(res16b), free(o16b), free(g), free(d32), free(d16), free(gw), free(gw2), free(gu), free(gu16), free(s16),
        free(guw), free(s32), free(df), free(dg32), free(dg16), free(cs), free(qf), free(q16), free(qw), free(qkv),
        free(att32), free(kv), free(lse), free(lse2), free(att16), free(kv16), free(dec32), free(scr), free(dec16);
}

/* ---------------------------------------------------------------- moe */

/* The router: scores, top k by score + bias (ties to the lower expert),
 * weights, per-sample sums of the balance probabilities, against a double
 * reference; the backward against finite differences of L = sum(R_w w) +
 * sum(R_a q) through the logits, the choices held fixed (the random logits
 * are far from ties at eps). */
typedef struct { float *logits, *scores, *w, *psum, *bias, *Rw, *Ra; int *idx; int N, E, k, sigmoid, norm, T, row0; } router_ctx;

static double router_obj(void *c) {
    router_ctx *r = c;
    int G = (r->row0 + r->N - 1) / r->T + 1;
    memcpy(r->scores, r->logits, (size_t)r->N * r->E * sizeof(float));
    ops->moe_router_forward(r->scores, r->idx, r->w, r->psum, r->scores, r->bias, r->N, r->E, r->k, r->sigmoid,
                            r->norm, r->T, r->row0);
    return dot_r(r->w, r->Rw, (size_t)r->N * r->k) + dot_r(r->psum, r->Ra, (size_t)G * r->E);
}

static void router_case(int N, int E, int k, int sigmoid, int norm, int with_bias, int T, int row0) {
    int G = (row0 + N - 1) / T + 1;
    router_ctx r = {rand_buf((size_t)N * E, 3), zero_buf((size_t)N * E), zero_buf((size_t)N * k), zero_buf((size_t)G * E),
                    with_bias ? rand_buf((size_t)E, 0.5f) : NULL, rand_buf((size_t)N * k, 1), rand_buf((size_t)G * E, 1),
                    calloc((size_t)N * k, sizeof(int)), N, E, k, sigmoid, norm, T, row0};
    router_obj(&r);
    double worst = 0;
    int picks_ok = 1;
    double *psum = calloc((size_t)G * E, sizeof(double));
    for (int n = 0; n < N; n++) {
        const float *z = r.logits + (size_t)n * E;
        double s[64], q = 0, mx = z[0], sum = 0;
        for (int e = 1; e < E; e++) mx = fmax(mx, z[e]);
        for (int e = 0; e < E; e++) s[e] = sigmoid ? 1.0 / (1.0 + exp(-z[e])) : exp(z[e] - mx), sum += s[e];
        for (int e = 0; e < E; e++) {
            if (!sigmoid) s[e] /= sum;
            q += s[e];
            worst = fmax(worst, rel_err(r.scores[(size_t)n * E + e], s[e], REF_FLOOR));
        }
        for (int e = 0; e < E; e++) psum[(size_t)((row0 + n) / T) * E + e] += sigmoid ? s[e] / q : s[e];
        /* the reference top k: repeatedly the best untaken, the lower on a tie */
        int taken[64] = {0};
        double chosen = 0;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || r.scores[(size_t)n * E + e] + (r.bias ? r.bias[e] : 0) >
                                                  r.scores[(size_t)n * E + best] + (r.bias ? r.bias[best] : 0)))
                    best = e;
            taken[best] = 1;
            picks_ok &= r.idx[(size_t)n * k + j] == best;
            chosen += s[best];
        }
        for (int j = 0; j < k; j++) {
            double want = s[r.idx[(size_t)n * k + j]] / (norm ? chosen : 1.0);
            worst = fmax(worst, rel_err(r.w[(size_t)n * k + j], want, REF_FLOOR));
        }
    }
    for (int i = 0; i < G * E; i++) worst = fmax(worst, rel_err(r.psum[i], psum[i], REF_FLOOR));
    CHECK(picks_ok && worst < REF_TOL,
          "moe_router_forward %s%s%s N=%d E=%d k=%d T=%d row0=%d: top k as the reference, scores, weights, sums max rel "
          "err %.1e", sigmoid ? "sigmoid" : "softmax", norm ? " normalised" : "", with_bias ? " biased" : "", N, E, k, T,
          row0, worst);
    /* backward: dw = Rw, daux = Ra (the objective's gradient in w and q) */
    float *dz = zero_buf((size_t)N * E), *dz2 = zero_buf((size_t)N * E);
    int *idx0 = malloc((size_t)N * k * sizeof(int));
    router_obj(&r);
    memcpy(idx0, r.idx, (size_t)N * k * sizeof(int));
    ops->moe_router_backward(dz, r.scores, r.idx, r.w, r.Rw, r.Ra, N, E, k, sigmoid, norm, T, row0);
    double e = fd_check(router_obj, &r, r.logits, dz, (size_t)N * E);
    router_obj(&r);
    int same = !memcmp(idx0, r.idx, (size_t)N * k * sizeof(int));
    CHECK(same && e < FD_TOL, "moe_router_backward %s%s vs finite differences (choices unchanged): max rel err %.1e",
          sigmoid ? "sigmoid" : "softmax", norm ? " normalised" : "", e);
    ops->moe_router_backward(dz2, r.scores, r.idx, r.w, r.Rw, r.Ra, N, E, k, sigmoid, norm, T, row0);
    ops->moe_router_backward(dz2, r.scores, r.idx, r.w, r.Rw, r.Ra, N, E, k, sigmoid, norm, T, row0);
    CHECK(accumulate_err(dz, dz2, (size_t)N * E) < ACC_TOL, "moe_router_backward accumulates (twice = 2x once)");
    free(r.logits), free(r.scores), free(r.w), free(r.psum), free(r.bias), free(r.Rw), free(r.Ra), free(r.idx);
    free(dz), free(dz2), free(idx0), free(psum);
}

/* The route against a reference written from ops.h's words: choices kept
 * per group and expert in row order up to the capacity (counting `before`),
 * the permuted order expert by expert, row by row. */
static void route_case(int N, int E, int k, int cap, int T, int row0, int with_before) {
    int G = (row0 + N - 1) / T + 1;
    int *idx = malloc((size_t)N * k * sizeof(int)), *dst = malloc((size_t)N * k * sizeof(int));
    int *src = malloc((size_t)N * k * sizeof(int)), *counts = malloc((size_t)E * sizeof(int));
    int *chosen = malloc((size_t)G * E * sizeof(int)), *before = calloc((size_t)G * E, sizeof(int));
    for (int n = 0; n < N; n++) /* k distinct experts, skewed to expert 0 and 1 */
        for (int j = 0; j < k; j++) {
            int e;
            do {
                float u = frand();
                e = u < -0.3f ? 0 : u < 0.2f ? 1 : (int)((u + 1.0f) * 0.5f * (float)E) % E;
                int dup = 0;
                for (int i = 0; i < j; i++) dup |= idx[(size_t)n * k + i] == e;
                if (dup) e = -1;
            } while (e < 0);
            idx[(size_t)n * k + j] = e;
        }
    if (with_before)
        for (int e = 0; e < E; e++) before[e] = e % 3; /* the first group began on another rank */
    ops->moe_route(dst, src, counts, chosen, idx, with_before ? before : NULL, N, E, k, cap, T, row0);
    /* reference */
    int ok = 1, M = 0, dropped = 0;
    int *rc = calloc((size_t)G * E, sizeof(int)), *keep = malloc((size_t)N * k * sizeof(int));
    int *cnt = calloc((size_t)E, sizeof(int));
    for (int n = 0; n < N; n++)
        for (int j = 0; j < k; j++) {
            int e = idx[(size_t)n * k + j], g = (row0 + n) / T;
            int earlier = rc[(size_t)g * E + e]++ + before[(size_t)g * E + e] * with_before;
            keep[(size_t)n * k + j] = cap == 0 || earlier < cap;
            cnt[e] += keep[(size_t)n * k + j];
            dropped += !keep[(size_t)n * k + j];
        }
    for (int i = 0; i < G * E; i++) ok &= chosen[i] == rc[i];
    for (int e = 0; e < E; e++) ok &= counts[e] == cnt[e], M += cnt[e];
    int at = 0;
    for (int e = 0; e < E; e++)
        for (int n = 0; n < N; n++)
            for (int j = 0; j < k; j++) {
                size_t c = (size_t)n * k + j;
                if (idx[c] != e) continue;
                if (!keep[c]) ok &= dst[c] == -1;
                else ok &= dst[c] == at && src[at] == n, at++;
            }
    CHECK(ok && at == M && (cap == 0 ? dropped == 0 : 1),
          "moe_route N=%d E=%d k=%d cap=%d T=%d row0=%d%s: chosen, counts, dst, src as the rule (%d kept, %d dropped)", N,
          E, k, cap, T, row0, with_before ? " before" : "", M, dropped);
    free(idx), free(dst), free(src), free(counts), free(chosen), free(before), free(rc), free(keep), free(cnt);
}

/* Permute, unpermute and their backwards against plain loops, fp32 and
 * bf16; the experts' grouped GEMM against one matmul per expert (bitwise:
 * the same calls), forward and backward, with an empty expert. */
static void test_moe(void) {
    router_case(7, 5, 2, 0, 1, 0, 7, 0);
    router_case(12, 8, 3, 1, 1, 1, 4, 0);
    router_case(9, 6, 1, 0, 0, 1, 4, 2); /* rows starting inside a sample */
    router_case(6, 4, 4, 1, 0, 0, 3, 0); /* k = E */
    float tie[4] = {1, 2, 2, 1}, tsc[4], tw[2];
    int tidx[2];
    ops->moe_router_forward(tsc, tidx, tw, NULL, tie, NULL, 1, 4, 2, 1, 1, 1, 0);
    CHECK(tidx[0] == 1 && tidx[1] == 2 && tw[0] == 0.5f && tw[1] == 0.5f,
          "moe_router_forward: equal scores go to the lower expert first (%d, %d), weights %g %g", tidx[0], tidx[1],
          tw[0], tw[1]);
    route_case(40, 6, 2, 0, 10, 0, 0);
    route_case(40, 6, 2, 3, 10, 0, 0);
    route_case(37, 5, 3, 2, 8, 5, 1);
    route_case(16, 4, 1, 1, 16, 0, 0);

    int N = 11, k = 2, C = 9, E = 3;
    int idx[22], dst[22], src[22], counts[3], chosen[3 * 2];
    for (int n = 0; n < N; n++) idx[n * k] = n % E, idx[n * k + 1] = (n + 1 + n / 4) % E == n % E ? (n + 2) % E : (n + 1 + n / 4) % E;
    ops->moe_route(dst, src, counts, chosen, idx, NULL, N, E, k, 4, 6, 0);
    int M = counts[0] + counts[1] + counts[2];
    for (int b = 0; b < 2; b++) {
        dt_dtype t = b ? DT_BF16 : DT_F32;
        size_t es = dt_dtype_size(t);
        float *xf = rand_buf((size_t)N * C, 1), *yf = rand_buf((size_t)N * k * C, 1), *w = rand_buf((size_t)N * k, 1);
        if (b) ops->round_bf16(xf, (size_t)N * C), ops->round_bf16(yf, (size_t)N * k * C);
        void *x = malloc((size_t)N * C * es), *y = malloc((size_t)N * k * C * es), *xe = malloc((size_t)N * k * C * es);
        if (b) ops->to_bf16(x, xf, (size_t)N * C), ops->to_bf16(y, yf, (size_t)N * k * C);
        else memcpy(x, xf, (size_t)N * C * 4), memcpy(y, yf, (size_t)N * k * C * 4);
        ops->moe_permute(xe, x, src, M, C, t);
        int ok = 1;
        for (int i = 0; i < M; i++) ok &= !memcmp((char *)xe + (size_t)i * C * es, (char *)x + (size_t)src[i] * C * es, C * es);
        float *out = rand_buf((size_t)N * C, 1), *out0 = malloc((size_t)N * C * 4);
        memcpy(out0, out, (size_t)N * C * 4);
        ops->moe_unpermute(out, y, dst, w, N, k, C, t, 1);
        double worst = 0;
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double want = out0[(size_t)n * C + c];
                for (int j = 0; j < k; j++)
                    if (dst[n * k + j] >= 0) want += (double)w[n * k + j] * yf[(size_t)dst[n * k + j] * C + c];
                worst = fmax(worst, rel_err(out[(size_t)n * C + c], want, REF_FLOOR));
            }
        /* backwards: dx += sum of its choices' rows; dy, dw of the weighted sum */
        float *g = rand_buf((size_t)N * k * C, 1), *dx = zero_buf((size_t)N * C), *dout = rand_buf((size_t)N * C, 1);
        float *dy = zero_buf((size_t)N * k * C), *dw = zero_buf((size_t)N * k);
        ops->moe_permute_backward(dx, g, dst, N, k, C);
        ops->moe_unpermute_backward(dy, dw, dout, y, dst, w, N, k, C, t);
        for (int n = 0; n < N; n++) {
            for (int c = 0; c < C; c++) {
                double want = 0;
                for (int j = 0; j < k; j++)
                    if (dst[n * k + j] >= 0) want += g[(size_t)dst[n * k + j] * C + c];
                worst = fmax(worst, rel_err(dx[(size_t)n * C + c], want, REF_FLOOR));
            }
            for (int j = 0; j < k; j++) {
                int r = dst[n * k + j];
                double want = 0;
                for (int c = 0; c < C && r >= 0; c++) {
                    want += (double)dout[(size_t)n * C + c] * yf[(size_t)r * C + c];
                    worst = fmax(worst, rel_err(dy[(size_t)r * C + c], w[n * k + j] * dout[(size_t)n * C + c], REF_FLOOR));
                }
                worst = fmax(worst, rel_err(dw[n * k + j], want, REF_FLOOR));
            }
        }
        CHECK(ok && worst < REF_TOL && M < N * k,
              "moe_permute (bitwise), moe_unpermute, their backwards %s: %d of %d choices kept, max rel err %.1e",
              b ? "bf16" : "fp32", M, N * k, worst);
        free(xf), free(yf), free(w), free(x), free(y), free(xe), free(out), free(out0), free(g), free(dx), free(dout),
            free(dy), free(dw);
    }
    /* grouped GEMM = a matmul per expert; expert 1 empty */
    int gc[3] = {5, 0, 7}, IC = 6, OC = 10, R = 12;
    float *in = rand_buf((size_t)R * IC, 1), *wt = rand_buf((size_t)3 * OC * IC, 1), *o1 = zero_buf((size_t)R * OC);
    float *o2 = zero_buf((size_t)R * OC), *go = rand_buf((size_t)R * OC, 1);
    float *di1 = zero_buf((size_t)R * IC), *dw1 = zero_buf((size_t)3 * OC * IC), *di2 = zero_buf((size_t)R * IC),
          *dw2 = zero_buf((size_t)3 * OC * IC);
    ops->moe_grouped_forward(o1, in, wt, gc, 3, IC, OC, DT_F32, DT_F32);
    ops->moe_grouped_backward(di1, dw1, go, in, wt, gc, 3, IC, OC, DT_F32);
    ops->matmul_forward(o2, in, wt, NULL, 5, IC, OC, DT_F32, DT_F32);
    ops->matmul_forward(o2 + 5 * OC, in + 5 * IC, wt + 2 * OC * IC, NULL, 7, IC, OC, DT_F32, DT_F32);
    ops->matmul_backward(di2, dw2, NULL, go, in, wt, 5, IC, OC, DT_F32);
    ops->matmul_backward(di2 + 5 * IC, dw2 + 2 * OC * IC, NULL, go + 5 * OC, in + 5 * IC, wt + 2 * OC * IC, 7, IC, OC,
                         DT_F32);
    CHECK(!memcmp(o1, o2, (size_t)R * OC * 4) && !memcmp(di1, di2, (size_t)R * IC * 4) &&
              !memcmp(dw1, dw2, (size_t)3 * OC * IC * 4),
          "moe_grouped_forward / _backward = one matmul per expert's rows, bit for bit (an empty expert's weight "
          "gradient untouched)");
    free(in), free(wt), free(o1), free(o2), free(go), free(di1), free(dw1), free(di2), free(dw2);
}

int main(void) {
    test_memory();
    test_matmul();
    test_attention();
    test_gqa();
    test_layernorm();
    test_rmsnorm();
    test_swiglu();
    test_moe();
    test_rope();
    test_gelu();
    test_gelu_erf();
    test_residual();
    test_embedding();
    test_posadd();
    test_patch();
    test_xent();
    test_adamw();
    test_reduce();
    test_bf16();
    test_act_bf16();
    test_llama_bf16();
    test_empty();
    bench();
    CHECK_DONE();
}
