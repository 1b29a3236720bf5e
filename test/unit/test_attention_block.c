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
 *  - rows that see no key (lse -inf) and a merge with such a partial;
 *  - document masking (segment ids of packed samples): every case above
 *    against each sample's attention computed alone (a sequence of its own),
 *    boundaries inside blocks, tiles and the ring's chunks.
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

/* The reference: the whole sequence through attention_forward / _backward;
 * with segment ids (seg: [B*T], runs of equal ids), each segment's rows
 * alone, as a sequence of their own (a packed sample run by itself). */
typedef struct {
    int B, T, C, NH, NKV, causal;
    float *qkv, *dout, *out, *dqkv;
} ref_case;

static ref_case ref_make_seg(int B, int T, int C, int NH, int NKV, int causal, const int *seg)
{
    ref_case r = {B, T, C, NH, NKV, causal, NULL, NULL, NULL, NULL};
    size_t N = (size_t)B * T, W = (size_t)dt_qkv_cols(C, NH, NKV);
    r.qkv = rbuf(N * W, 1.5f);
    r.dout = rbuf(N * C, 1.0f);
    r.out = calloc(N * C, sizeof(float));
    r.dqkv = calloc(N * W, sizeof(float));
    float *att = calloc((size_t)B * NH * T * T, sizeof(float)), *scr = calloc((size_t)B * NH * T * T, sizeof(float));
    if (!seg) {
        ops->attention_forward(r.out, att, r.qkv, B, T, C, NH, NKV, causal, DT_F32);
        ops->attention_backward(r.dqkv, scr, r.dout, r.qkv, att, B, T, C, NH, NKV, causal, DT_F32);
    }
    for (size_t i = 0; seg && i < N;) { /* rows [i, e): one segment of one sample */
        size_t e = i + 1;
        while (e < N && e % (size_t)T && seg[e] == seg[i]) e++;
        int L = (int)(e - i);
        ops->attention_forward(r.out + i * C, att, r.qkv + i * W, 1, L, C, NH, NKV, causal, DT_F32);
        ops->attention_backward(r.dqkv + i * W, scr, r.dout + i * C, r.qkv + i * W, att, 1, L, C, NH, NKV, causal,
                                DT_F32);
        i = e;
    }
    free(att), free(scr);
    return r;
}

/* Packed samples' segment ids, [B*T]: runs of the lengths lens[] (cycled,
 * starting at an offset that differs per sample), ids 0, 1, ... in each
 * sample. */
static int *segs_make(int B, int T, const int *lens, int nl)
{
    int *seg = malloc((size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++) {
        int id = 0, k = b % nl, left = lens[k];
        for (int t = 0; t < T; t++) {
            if (left == 0) id++, k = (k + 1) % nl, left = lens[k];
            seg[(size_t)b * T + t] = id;
            left--;
        }
    }
    return seg;
}

static void ref_free(ref_case *r) { free(r->qkv), free(r->dout), free(r->out), free(r->dqkv); }

/* Contiguous blocks of Tb rows over one [B, T] buffer (Ts = T); with seg,
 * packed samples (each block's ids from its first row: qseg + q0, kseg + k0). */
static void test_contiguous_seg(int B, int T, int C, int NH, int NKV, int causal, int Tb, const int *seg)
{
    ref_case r = ref_make_seg(B, T, C, NH, NKV, causal, seg);
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
                                         seg ? seg + q0 : NULL, seg ? seg + k0 : NULL, B, T, Tb, Tb, C, NH, NKV,
                                         causal, q0 - k0, DT_F32, DT_F32);
            if (kj > 0)
                ops->attention_block_merge(out + (size_t)q0 * C, lse + q0, pout + (size_t)q0 * C, plse + q0, B, T,
                                           Tb, C, NH);
        }
    double ef = max_rel(out, r.out, N * C, 1e-2);
    CHECK(ef < 1e-5,
          "attention_block_forward+merge B=%d T=%d C=%d NH=%d NKV=%d %s in blocks of %d = attention_forward%s: %.1e",
          B, T, C, NH, NKV, causal ? "causal" : "full", Tb, seg ? " of each packed sample alone" : "", ef);

    float *dqkv = calloc(N * C3, sizeof(float)), *dkv = calloc(N * C2, sizeof(float));
    for (int qi = 0; qi < nb; qi++)
        for (int kj = 0; kj < nb; kj++) {
            if (causal && kj > qi) continue;
            int q0 = qi * Tb, k0 = kj * Tb;
            ops->attention_block_backward(dqkv + (size_t)q0 * C3, dkv + (size_t)k0 * C2, r.dout + (size_t)q0 * C,
                                          out + (size_t)q0 * C, lse + q0, r.qkv + (size_t)q0 * C3,
                                          kv + (size_t)k0 * C2, seg ? seg + q0 : NULL, seg ? seg + k0 : NULL, B, T,
                                          Tb, Tb, C, NH, NKV, causal, q0 - k0, DT_F32);
        }
    ops->rows_copy(dqkv + C, C3, dkv, C2, (int)N, C2, 1, DT_F32);
    double eb = max_rel(dqkv, r.dqkv, N * C3, 1e-2);
    CHECK(eb < 1e-4,
          "attention_block_backward B=%d T=%d C=%d NH=%d NKV=%d %s in blocks of %d = attention_backward%s: %.1e", B,
          T, C, NH, NKV, causal ? "causal" : "full", Tb, seg ? " of each packed sample alone" : "", eb);
    free(kv), free(out), free(lse), free(pout), free(plse), free(dqkv), free(dkv);
    ref_free(&r);
}

static void test_contiguous(int B, int T, int C, int NH, int NKV, int causal, int Tb)
{
    test_contiguous_seg(B, T, C, NH, NKV, causal, Tb, NULL);
}

/* The ring's work on cp ranks, each holding its two chunks (cp_blocks); with
 * seg ([B, 2 cp Tc]), packed samples: each rank's segment ids of its chunks
 * in its local layout, as the ring passes them (cp.c). */
static void test_load_balanced_seg(int B, int cp, int Tc, int C, int NH, int NKV, const int *seg)
{
    int T = 2 * cp * Tc, Tl = 2 * Tc, C2 = dt_kv_cols(C, NH, NKV), C3 = dt_qkv_cols(C, NH, NKV);
    ref_case r = ref_make_seg(B, T, C, NH, NKV, 1, seg);
    size_t Nl = (size_t)B * Tl;
    int **lseg = calloc((size_t)cp, sizeof(int *));
    float **lq = calloc((size_t)cp, sizeof(float *)), **lkv = calloc((size_t)cp, sizeof(float *));
    float **ldq = calloc((size_t)cp, sizeof(float *)), **ldkv = calloc((size_t)cp, sizeof(float *));
    /* local rows <-> global rows */
    for (int k = 0; k < cp; k++) {
        lq[k] = calloc(Nl * C3, sizeof(float));
        lkv[k] = calloc(Nl * C2, sizeof(float));
        ldq[k] = calloc(Nl * C3, sizeof(float));
        ldkv[k] = calloc(Nl * C2, sizeof(float));
        lseg[k] = calloc(Nl, sizeof(int));
        for (int b = 0; b < B; b++)
            for (int h = 0; h < 2; h++) {
                size_t g = (size_t)b * T + (size_t)model_cp_chunk(k, cp, h) * Tc, l = (size_t)b * Tl + (size_t)h * Tc;
                memcpy(lq[k] + l * C3, r.qkv + g * C3, (size_t)Tc * C3 * sizeof(float));
                if (seg) memcpy(lseg[k] + l, seg + g, (size_t)Tc * sizeof(int));
            }
        ops->rows_copy(lkv[k], C2, lq[k] + C, C3, (int)Nl, C2, 0, DT_F32);
    }
    /* every rank's ids, [cp][B][Tl] (model_docs.seg_host): the blocks no
     * sample spans are skipped, as the ring skips them */
    int *allseg = calloc((size_t)cp * Nl, sizeof(int)), skipped = 0, blocks = 0;
    for (int k = 0; seg && k < cp; k++) memcpy(allseg + (size_t)k * Nl, lseg[k], Nl * sizeof(int));
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
                blocks++;
                if (seg && !cp_block_spans(bl, allseg, rk, s, B, Tl)) {
                    skipped++;
                    continue;
                }
                int h = bl->q_row ? 1 : 0;
                float *o = init[h] ? pout : out, *l = init[h] ? plse : lse;
                ops->attention_block_forward(o + (size_t)bl->q_row * C, l + bl->q_row, lq[rk] + (size_t)bl->q_row * C3,
                                             lkv[s] + (size_t)bl->k_row * C2, seg ? lseg[rk] + bl->q_row : NULL,
                                             seg ? lseg[s] + bl->k_row : NULL, B, Tl, bl->q_rows, bl->k_rows, C, NH,
                                             NKV, bl->causal, bl->shift, DT_F32, DT_F32);
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
                if (seg && !cp_block_spans(bl, allseg, rk, s, B, Tl)) continue;
                ops->attention_block_backward(ldq[rk] + (size_t)bl->q_row * C3, ldkv[s] + (size_t)bl->k_row * C2,
                                              dout + (size_t)bl->q_row * C, out + (size_t)bl->q_row * C,
                                              lse + bl->q_row, lq[rk] + (size_t)bl->q_row * C3,
                                              lkv[s] + (size_t)bl->k_row * C2, seg ? lseg[rk] + bl->q_row : NULL,
                                              seg ? lseg[s] + bl->k_row : NULL, B, Tl, bl->q_rows, bl->k_rows, C, NH,
                                              NKV, bl->causal, bl->shift, DT_F32);
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
    const char *packed = seg ? " (packed samples: each alone)" : "";
    if (seg)
        CHECK(skipped > 0, "load-balanced cp %d, packed samples: cp_block_spans skips %d of %d blocks (no sample spans "
                           "them) and the result stays each sample's own", cp, skipped, blocks);
    CHECK(ef < 2e-5, "load-balanced cp %d (B=%d chunks of %d, C=%d NH=%d NKV=%d)%s: every rank's merged output = "
                     "attention_forward's rows of its chunks: %.1e", cp, B, Tc, C, NH, NKV, packed, ef);
    CHECK(eb < 1e-4, "load-balanced cp %d NKV=%d%s: dq, dk, dv summed over the ranks = attention_backward's: %.1e", cp,
          NKV, packed, eb);
    for (int k = 0; k < cp; k++) free(lq[k]), free(lkv[k]), free(ldq[k]), free(ldkv[k]), free(lseg[k]);
    free(lq), free(lkv), free(ldq), free(ldkv), free(out), free(lse), free(pout), free(plse), free(dout), free(gout);
    free(want), free(lseg), free(allseg);
    ref_free(&r);
}

static void test_load_balanced(int B, int cp, int Tc, int C, int NH, int NKV)
{
    test_load_balanced_seg(B, cp, Tc, C, NH, NKV, NULL);
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
    ops->attention_block_forward(out, lse, qkv, kv, NULL, NULL, B, T, T, T, C, NH, NH, 1, -2, DT_F32, DT_F32); /* rows 0, 1 see nothing */
    int ok = isinf(lse[0]) && lse[0] < 0 && isinf(lse[1]) && !isinf(lse[2]) && out[0] == 0 && out[4] == 0;
    memcpy(keep, out, sizeof out), memcpy(keep_lse, lse, sizeof lse);
    float part[16] = {0}, plse[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    ops->attention_block_merge(out, lse, part, plse, B, T, T, C, NH);
    ok = ok && !memcmp(out, keep, sizeof out) && !memcmp(lse, keep_lse, sizeof lse);
    CHECK(ok, "attention_block: rows that see no key give out 0 and lse -inf; merging an empty partial is a no-op");
    free(qkv), free(kv);
}

/* Document masking (segment ids): packed samples give each sample's
 * attention alone, as one block, in blocks, in tiles of 64 rows that a
 * sample boundary cuts, with GQA, and across the ring's load-balanced
 * chunks with boundaries inside a chunk. */
static void test_packed(void)
{
    static const int short_lens[] = {5, 1, 9, 3}, long_lens[] = {70, 3, 40, 17}, ring_lens[] = {3, 6, 2, 11, 1};
    int *s1 = segs_make(2, 24, short_lens, 4), *s2 = segs_make(1, 130, long_lens, 4);
    int *s3 = segs_make(2, 24, ring_lens, 5), *s4 = segs_make(1, 2 * 4 * 5, ring_lens, 5);
    test_contiguous_seg(2, 24, 8, 2, 2, 1, 24, s1);    /* one block */
    test_contiguous_seg(2, 24, 8, 2, 2, 1, 4, s1);     /* blocks of 4: boundaries inside and between blocks */
    test_contiguous_seg(2, 24, 8, 2, 2, 0, 8, s1);     /* bidirectional within each sample */
    test_contiguous_seg(1, 130, 16, 2, 2, 1, 130, s2); /* tiles of 64 rows cut by boundaries */
    test_contiguous_seg(1, 130, 24, 6, 2, 1, 65, s2);  /* GQA, blocks of 65 */
    test_contiguous_seg(2, 24, 16, 4, 1, 1, 8, s1);    /* MQA */
    test_load_balanced_seg(2, 2, 6, 8, 2, 2, s3);      /* cp 2: chunks of 6, samples of 1..11 */
    test_load_balanced_seg(1, 4, 5, 12, 3, 1, s4);     /* cp 4, MQA */
    free(s1), free(s2), free(s3), free(s4);
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
    test_packed();
    CHECK_DONE();
}
