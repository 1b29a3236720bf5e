/* test_attention_block.c — blockwise attention (ops.h attention_block_*,
 * context parallelism's compute) against the whole-sequence attention_forward
 * / attention_backward on random inputs:
 *  - one sequence cut into contiguous blocks (full and causal: the diagonal
 *    blocks masked, the blocks above it skipped), each query block merging its
 *    key blocks' partial results; backward block by block from the merged
 *    out and lse, dk and dv added back through rows_copy;
 *  - the load-balanced layout of cp ranks (cp_blocks: rank r holds chunks r
 *    and 2cp-1-r), every rank's queries against every rank's keys, as the
 *    ring computes them;
 *  - rows that see no key (lse -inf) and a merge with such a partial.
 * Every case also with grouped-query attention (NKV < NH kv heads, ops.h):
 * the blockwise ops against the whole-sequence ops with the same heads,
 * whose own GQA is checked against a reference in test_kernels.
 * Tolerances: forward relative 1e-5 (2e-5 over the longer ring) with a 1e-2 floor (only the order of fp32
 * sums differs), backward 1e-4. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "runtime/parallel/cp.h"
#include "test/unit/check.h"

static const dt_ops *ops = &dt_ops_cpu;
static unsigned long long rng = 0x2545F4914F6CDD1Dull;

static float frand(void)
{
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static float *rbuf(size_t n, float s)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = frand() * s;
    return p;
}

static double max_rel(const float *a, const float *b, size_t n, double floor)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]), s = fmax(fmax(fabs(a[i]), fabs(b[i])), floor);
        if (d / s > m || a[i] != a[i]) m = a[i] != a[i] ? INFINITY : d / s;
    }
    return m;
}

/* The reference: the whole sequence through attention_forward / _backward. */
typedef struct {
    int B, T, C, NH, NKV, causal;
    float *qkv, *dout, *out, *dqkv;
} ref_case;

static ref_case ref_make(int B, int T, int C, int NH, int NKV, int causal)
{
    ref_case r = {B, T, C, NH, NKV, causal, NULL, NULL, NULL, NULL};
    size_t N = (size_t)B * T, W = (size_t)dt_qkv_cols(C, NH, NKV);
    r.qkv = rbuf(N * W, 1.5f);
    r.dout = rbuf(N * C, 1.0f);
    r.out = calloc(N * C, sizeof(float));
    r.dqkv = calloc(N * W, sizeof(float));
    float *att = calloc((size_t)B * NH * T * T, sizeof(float)), *scr = calloc((size_t)B * NH * T * T, sizeof(float));
    ops->attention_forward(r.out, att, r.qkv, B, T, C, NH, NKV, causal, DT_F32);
    ops->attention_backward(r.dqkv, scr, r.dout, r.qkv, att, B, T, C, NH, NKV, causal, DT_F32);
    free(att), free(scr);
    return r;
}

static void ref_free(ref_case *r) { free(r->qkv), free(r->dout), free(r->out), free(r->dqkv); }

/* Contiguous blocks of Tb rows over one [B, T] buffer (Ts = T). */
static void test_contiguous(int B, int T, int C, int NH, int NKV, int causal, int Tb)
{
    ref_case r = ref_make(B, T, C, NH, NKV, causal);
    size_t N = (size_t)B * T;
    int C2 = dt_kv_cols(C, NH, NKV), C3 = dt_qkv_cols(C, NH, NKV), nb = T / Tb;
    float *kv = calloc(N * C2, sizeof(float)), *out = calloc(N * C, sizeof(float));
    float *lse = calloc((size_t)B * NH * T, sizeof(float)), *pout = calloc(N * C, sizeof(float));
    float *plse = calloc((size_t)B * NH * T, sizeof(float));
    ops->rows_copy(kv, C2, r.qkv + C, C3, (int)N, C2, 0, DT_F32);
    for (int qi = 0; qi < nb; qi++)
        for (int kj = 0; kj < nb; kj++) {
            if (causal && kj > qi) continue;
            int q0 = qi * Tb, k0 = kj * Tb;
            float *o = kj == 0 ? out : pout, *l = kj == 0 ? lse : plse;
            ops->attention_block_forward(o + (size_t)q0 * C, l + q0, r.qkv + (size_t)q0 * C3, kv + (size_t)k0 * C2,
                                         B, T, Tb, Tb, C, NH, NKV, causal, q0 - k0, DT_F32, DT_F32);
            if (kj > 0)
                ops->attention_block_merge(out + (size_t)q0 * C, lse + q0, pout + (size_t)q0 * C, plse + q0, B, T,
                                           Tb, C, NH);
        }
    double ef = max_rel(out, r.out, N * C, 1e-2);
    CHECK(ef < 1e-5,
          "attention_block_forward+merge B=%d T=%d C=%d NH=%d NKV=%d %s in blocks of %d = attention_forward: %.1e", B,
          T, C, NH, NKV, causal ? "causal" : "full", Tb, ef);

    float *dqkv = calloc(N * C3, sizeof(float)), *dkv = calloc(N * C2, sizeof(float));
    for (int qi = 0; qi < nb; qi++)
        for (int kj = 0; kj < nb; kj++) {
            if (causal && kj > qi) continue;
            int q0 = qi * Tb, k0 = kj * Tb;
            ops->attention_block_backward(dqkv + (size_t)q0 * C3, dkv + (size_t)k0 * C2, r.dout + (size_t)q0 * C,
                                          out + (size_t)q0 * C, lse + q0, r.qkv + (size_t)q0 * C3,
                                          kv + (size_t)k0 * C2, B, T, Tb, Tb, C, NH, NKV, causal, q0 - k0, DT_F32);
        }
    ops->rows_copy(dqkv + C, C3, dkv, C2, (int)N, C2, 1, DT_F32);
    double eb = max_rel(dqkv, r.dqkv, N * C3, 1e-2);
    CHECK(eb < 1e-4,
          "attention_block_backward B=%d T=%d C=%d NH=%d NKV=%d %s in blocks of %d = attention_backward: %.1e", B, T,
          C, NH, NKV, causal ? "causal" : "full", Tb, eb);
    free(kv), free(out), free(lse), free(pout), free(plse), free(dqkv), free(dkv);
    ref_free(&r);
}

/* The ring's work on cp ranks, each holding its two chunks (cp_blocks). */
static void test_load_balanced(int B, int cp, int Tc, int C, int NH, int NKV)
{
    int T = 2 * cp * Tc, Tl = 2 * Tc, C2 = dt_kv_cols(C, NH, NKV), C3 = dt_qkv_cols(C, NH, NKV);
    ref_case r = ref_make(B, T, C, NH, NKV, 1);
    size_t Nl = (size_t)B * Tl;
    float **lq = calloc((size_t)cp, sizeof(float *)), **lkv = calloc((size_t)cp, sizeof(float *));
    float **ldq = calloc((size_t)cp, sizeof(float *)), **ldkv = calloc((size_t)cp, sizeof(float *));
    /* local rows <-> global rows */
    for (int k = 0; k < cp; k++) {
        lq[k] = calloc(Nl * C3, sizeof(float));
        lkv[k] = calloc(Nl * C2, sizeof(float));
        ldq[k] = calloc(Nl * C3, sizeof(float));
        ldkv[k] = calloc(Nl * C2, sizeof(float));
        for (int b = 0; b < B; b++)
            for (int h = 0; h < 2; h++)
                memcpy(lq[k] + ((size_t)b * Tl + (size_t)h * Tc) * C3,
                       r.qkv + ((size_t)b * T + (size_t)model_cp_chunk(k, cp, h) * Tc) * C3,
                       (size_t)Tc * C3 * sizeof(float));
        ops->rows_copy(lkv[k], C2, lq[k] + C, C3, (int)Nl, C2, 0, DT_F32);
    }
    double ef = 0, eb = 0;
    float *out = calloc(Nl * C, sizeof(float)), *lse = calloc((size_t)B * NH * Tl, sizeof(float));
    float *pout = calloc(Nl * C, sizeof(float)), *plse = calloc((size_t)B * NH * Tl, sizeof(float));
    float *dout = calloc(Nl * C, sizeof(float)), *gout = calloc(Nl * C, sizeof(float));
    for (int rk = 0; rk < cp; rk++) {
        int init[2] = {0, 0};
        for (int i = 0; i < cp; i++) {
            int s = (rk - i + cp) % cp;
            cp_block blk[4];
            int n = cp_blocks(rk, s, cp, Tl, 1, blk);
            for (int k = 0; k < n; k++) {
                const cp_block *bl = &blk[k];
                int h = bl->q_row ? 1 : 0;
                float *o = init[h] ? pout : out, *l = init[h] ? plse : lse;
                ops->attention_block_forward(o + (size_t)bl->q_row * C, l + bl->q_row, lq[rk] + (size_t)bl->q_row * C3,
                                             lkv[s] + (size_t)bl->k_row * C2, B, Tl, bl->q_rows, bl->k_rows, C, NH, NKV,
                                             bl->causal, bl->shift, DT_F32, DT_F32);
                if (init[h])
                    ops->attention_block_merge(out + (size_t)bl->q_row * C, lse + bl->q_row,
                                               pout + (size_t)bl->q_row * C, plse + bl->q_row, B, Tl, bl->q_rows, C,
                                               NH);
                init[h] = 1;
            }
        }
        /* this rank's rows of the reference output and output gradient */
        for (int b = 0; b < B; b++)
            for (int h = 0; h < 2; h++) {
                size_t g = ((size_t)b * T + (size_t)model_cp_chunk(rk, cp, h) * Tc) * C;
                size_t lo = ((size_t)b * Tl + (size_t)h * Tc) * C;
                memcpy(gout + lo, r.out + g, (size_t)Tc * C * sizeof(float));
                memcpy(dout + lo, r.dout + g, (size_t)Tc * C * sizeof(float));
            }
        double e = max_rel(out, gout, Nl * C, 1e-2);
        if (e > ef) ef = e;
        for (int s = 0; s < cp; s++) {
            cp_block blk[4];
            int n = cp_blocks(rk, s, cp, Tl, 1, blk);
            for (int k = 0; k < n; k++) {
                const cp_block *bl = &blk[k];
                ops->attention_block_backward(ldq[rk] + (size_t)bl->q_row * C3, ldkv[s] + (size_t)bl->k_row * C2,
                                              dout + (size_t)bl->q_row * C, out + (size_t)bl->q_row * C,
                                              lse + bl->q_row, lq[rk] + (size_t)bl->q_row * C3,
                                              lkv[s] + (size_t)bl->k_row * C2, B, Tl, bl->q_rows, bl->k_rows, C, NH, NKV,
                                              bl->causal, bl->shift, DT_F32);
            }
        }
    }
    float *want = calloc(Nl * C3, sizeof(float));
    for (int k = 0; k < cp; k++) {
        ops->rows_copy(ldq[k] + C, C3, ldkv[k], C2, (int)Nl, C2, 1, DT_F32);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < 2; h++)
                memcpy(want + ((size_t)b * Tl + (size_t)h * Tc) * C3,
                       r.dqkv + ((size_t)b * T + (size_t)model_cp_chunk(k, cp, h) * Tc) * C3,
                       (size_t)Tc * C3 * sizeof(float));
        double e = max_rel(ldq[k], want, Nl * C3, 1e-2);
        if (e > eb) eb = e;
    }
    CHECK(ef < 2e-5, "load-balanced cp %d (B=%d chunks of %d, C=%d NH=%d NKV=%d): every rank's merged output = "
                     "attention_forward's rows of its chunks: %.1e", cp, B, Tc, C, NH, NKV, ef);
    CHECK(eb < 1e-4, "load-balanced cp %d NKV=%d: dq, dk, dv summed over the ranks = attention_backward's: %.1e", cp,
          NKV, eb);
    for (int k = 0; k < cp; k++) free(lq[k]), free(lkv[k]), free(ldq[k]), free(ldkv[k]);
    free(lq), free(lkv), free(ldq), free(ldkv), free(out), free(lse), free(pout), free(plse), free(dout), free(gout);
    free(want);
    ref_free(&r);
}

/* cp_blocks: the causal mask's work is the same on every rank at every step. */
static void test_balance(void)
{
    int ok = 1;
    for (int cp = 2; cp <= 8; cp *= 2)
        for (int r = 0; r < cp; r++)
            for (int s = 0; s < cp; s++) {
                cp_block blk[4];
                int n = cp_blocks(r, s, cp, 8, 1, blk), full = 0, diag = 0;
                for (int k = 0; k < n; k++) blk[k].causal ? diag++ : full++;
                if (r == s ? !(full == 1 && diag == 2) : !(full == 2 && diag == 0)) ok = 0;
            }
    CHECK(ok, "cp_blocks: every step gives each rank two chunk pairs of work (self: one whole and two diagonal)");
}

/* A row that sees no key: out 0, lse -inf; merging it changes nothing. */
static void test_empty_rows(void)
{
    int B = 1, T = 4, C = 4, NH = 1;
    float *qkv = rbuf((size_t)T * 3 * C, 1), *kv = calloc((size_t)T * 2 * C, sizeof(float));
    float out[16], lse[4], keep[16], keep_lse[4];
    ops->rows_copy(kv, 2 * C, qkv + C, 3 * C, T, 2 * C, 0, DT_F32);
    ops->attention_block_forward(out, lse, qkv, kv, B, T, T, T, C, NH, NH, 1, -2, DT_F32, DT_F32); /* rows 0, 1 see nothing */
    int ok = isinf(lse[0]) && lse[0] < 0 && isinf(lse[1]) && !isinf(lse[2]) && out[0] == 0 && out[4] == 0;
    memcpy(keep, out, sizeof out), memcpy(keep_lse, lse, sizeof lse);
    float part[16] = {0}, plse[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    ops->attention_block_merge(out, lse, part, plse, B, T, T, C, NH);
    ok = ok && !memcmp(out, keep, sizeof out) && !memcmp(lse, keep_lse, sizeof lse);
    CHECK(ok, "attention_block: rows that see no key give out 0 and lse -inf; merging an empty partial is a no-op");
    free(qkv), free(kv);
}

int main(void)
{
    test_contiguous(2, 12, 8, 2, 2, 0, 4);
    test_contiguous(2, 12, 8, 2, 2, 1, 4);
    test_contiguous(1, 130, 16, 2, 2, 1, 65); /* tiles of 64 rows inside a block */
    test_contiguous(2, 16, 12, 3, 3, 1, 16);  /* one block: the diagonal alone */
    test_contiguous(2, 12, 16, 4, 2, 0, 4);   /* GQA: 2 query heads a kv head */
    test_contiguous(2, 12, 16, 4, 1, 1, 4);   /* MQA */
    test_contiguous(1, 130, 24, 6, 2, 1, 65); /* GQA, tiles of 64 rows inside a block */
    test_load_balanced(2, 2, 4, 8, 2, 2);
    test_load_balanced(1, 4, 3, 12, 3, 3);
    test_load_balanced(2, 2, 70, 16, 2, 2);
    test_load_balanced(2, 2, 5, 16, 4, 2); /* GQA under the ring */
    test_load_balanced(1, 4, 3, 12, 3, 1); /* MQA under the ring */
    test_balance();
    test_empty_rows();
    CHECK_DONE();
}
