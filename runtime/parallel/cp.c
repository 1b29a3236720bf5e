/* cp.c — context parallelism in ring mode (cp.h): the model's attention core
 * (model_attention) over the cp group.
 *
 * Forward, on cp rank r of cp, for the local queries q (its two chunks):
 *   kv <- this rank's k and v (packed out of qkv)
 *   for i = 0 .. cp-1:             (kv now holds rank s = r - i's)
 *       send kv to rank r+1 and receive rank s-1's from rank r-1, meanwhile
 *       compute the blocks cp_blocks(r, s): each a partial (out, lse) merged
 *       into the result (ops->attention_block_*), the self block first
 * Backward, from the final out and lse (kept by the model as the block's
 * stat), with dq local and each kv travelling with its gradient dkv:
 *   for i = 0 .. cp-1:
 *       start passing kv on (not at the last step); compute the blocks into
 *       dq and the travelling dkv; pass dkv on
 *   after cp steps every dkv is back with its owner: added into dqkv.
 * Packed samples (model_docs): each block takes its rows' segment ids (the
 * queries' from this rank's, the keys' from their owner's: the model hands
 * every rank's, so none travel), and a block whose rows share no sample
 * (cp_block_spans, on the host ids) is not computed at all; kv still goes
 * round the whole ring (other samples of the batch, and the next ranks,
 * need it).
 * Every message goes to the next rank of the ring and comes from the previous
 * one; send and receive buffers alternate (two of them), so a transfer never
 * touches what is being computed on.
 *
 * The buffers are sized by sizes_cp_ring_numel (one source of truth with the
 * dry-run) and accounted as comm buffers. */
#include "runtime/parallel/cp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/parallel/strategy.h"

int cp_blocks(int r, int s, int cp, int Tl, int causal, cp_block *out)
{
    if (!causal) {
        out[0] = (cp_block){.q_row = 0, .q_rows = Tl, .k_row = 0, .k_rows = Tl, .causal = 0, .shift = 0};
        return 1;
    }
    int Tc = Tl / 2, n = 0;
    /* the self block's diagonal first: it initializes the result rows of the
     * first chunk, and (qb, ka) those of the second */
    static const int order[4][2] = {{0, 0}, {1, 0}, {1, 1}, {0, 1}};
    for (int o = 0; o < 4; o++) {
        int qh = order[o][0], kh = order[o][1];
        int qc = model_cp_chunk(r, cp, qh), kc = model_cp_chunk(s, cp, kh);
        if (kc > qc) continue; /* all masked */
        out[n++] = (cp_block){.q_row = qh * Tc, .q_rows = Tc, .k_row = kh * Tc, .k_rows = Tc,
                              .causal = kc == qc, .shift = 0};
    }
    return n;
}

int cp_block_spans(const cp_block *b, const int *seg_host, int r, int s, int B, int Tl)
{
    if (b->q_rows == Tl) return 1;
    size_t BT = (size_t)B * (size_t)Tl;
    for (int i = 0; i < B; i++) {
        const int *q = seg_host + (size_t)r * BT + (size_t)i * Tl + b->q_row;
        const int *k = seg_host + (size_t)s * BT + (size_t)i * Tl + b->k_row;
        if (q[0] <= k[b->k_rows - 1] && k[0] <= q[b->q_rows - 1]) return 1;
    }
    return 0;
}

/* Block b's segment ids (packed samples), or NULLs: the queries' from this
 * rank's rows, the keys' from rank s's. */
static void block_segs(const model_docs *docs, const cp_block *b, int r, int s, size_t N, const int **qs,
                       const int **ks)
{
    *qs = docs ? docs->seg + (size_t)r * N + b->q_row : NULL;
    *ks = docs ? docs->seg + (size_t)s * N + b->k_row : NULL;
}

struct cp_ring {
    strat_ctx *x;
    const dt_ops *ops;
    comm *c;
    int rank, size, next, prev;
    size_t cap_rows;  /* rows (B * T_local) the buffers hold */
    size_t cap_cols;  /* C_l */
    size_t cap_k2;    /* a row of k and v: 2 C_l, or 2 NKV_l hs under GQA (dt_kv_cols) */
    size_t cap_lse;   /* B * NH_l * T_local */
    float *mem;
    float *buf[2];    /* [cap_rows, cap_k2 + max(cap_k2, C_l)] floats: kv (cap_k2 per row, the
                         activations' type) then dkv (cap_k2 fp32 per row) or, in a bf16
                         forward, the fp32 result (C_l per row) */
    float *pout;      /* [cap_rows, C_l] a block's partial output */
    float *plse;      /* [cap_lse] its log-sum-exp */
};

/* ---- the ring's transfers over x->cp, timed and checked like tp's ---- */

typedef struct {
    comm_req *send, *recv;
} cp_xfer;

static cp_xfer xfer_start(cp_ring *g, const void *send, void *recv, size_t n, dt_dtype t, const char *what)
{
    cp_xfer x = {NULL, NULL};
    strat_ctx *s = g->x;
    if (s->failed) return x;
    comm_dtype dt = t == DT_BF16 ? COMM_BF16 : COMM_F32;
    int rc = comm_recv_async(g->c, recv, n, dt, g->prev, &x.recv);
    if (rc == COMM_OK) rc = comm_send_async(g->c, send, n, dt, g->next, &x.send);
    strat_fail(s, g->c, rc, what);
    return x;
}

static void xfer_wait(cp_ring *g, cp_xfer *t, const char *what)
{
    strat_wait(g->x, g->c, t->send, what);
    strat_wait(g->x, g->c, t->recv, what);
    t->send = t->recv = NULL;
}

/* A micro-batch larger than the buffers were sized for is a sizing bug: stop. */
static void check_fits(const cp_ring *g, int B, int T, int C, int NH, int NKV)
{
    size_t rows = (size_t)B * (size_t)T, lse = rows * (size_t)NH;
    if (rows <= g->cap_rows && (size_t)C <= g->cap_cols && (size_t)dt_kv_cols(C, NH, NKV) <= g->cap_k2 &&
        lse <= g->cap_lse)
        return;
    fprintf(stderr, "dtrun: cp: a micro-batch of %d x %d rows x %d channels, buffers for %zu x %zu\n", B, T, C,
            g->cap_rows, g->cap_cols);
    abort();
}

/* kv (the activations' type t) travels in the first half of a buffer; the
 * second half (fp32) carries its gradient in backward, and in forward under
 * bf16 the result's fp32 accumulator (buf[0]'s: it stays put while the
 * buffers swap), rounded into out once every block is merged. */
static void ring_forward(void *ctx, void *out_t, void *lse_v, float *scratch, const void *qkv,
                         const model_docs *docs, int B, int T, int C, int NH, int NKV, int causal, dt_dtype t)
{
    cp_ring *g = ctx;
    (void)scratch; /* NULL: the ring's own buffers */
    const dt_ops *ops = g->ops;
    check_fits(g, B, T, C, NH, NKV);
    /* C2: a row of k and v (2C, or 2 NKV hs under GQA); C3: of q, k and v */
    int N = B * T, C2 = dt_kv_cols(C, NH, NKV), C3 = dt_qkv_cols(C, NH, NKV);
    size_t half = g->cap_rows * g->cap_k2;
    float *lse = lse_v, *out = t == DT_F32 ? (float *)out_t : g->buf[0] + half;
    float *cur = g->buf[0], *nxt = g->buf[1];
    ops->rows_copy(cur, C2, dt_at(qkv, (size_t)C, t), C3, N, C2, 0, t);
    int init[2] = {0, 0}; /* the result rows of each local chunk hold a first block */
    for (int i = 0; i < g->size; i++) {
        int s = (g->rank - i + g->size) % g->size;
        cp_xfer x = {NULL, NULL};
        if (i < g->size - 1) x = xfer_start(g, cur, nxt, (size_t)N * C2, t, "cp ring: kv");
        cp_block blk[4];
        int nb = cp_blocks(g->rank, s, g->size, T, causal, blk);
        for (int k = 0; k < nb; k++) {
            const cp_block *b = &blk[k];
            /* packed samples: a block no sample spans adds nothing (its rows'
             * diagonal block, always computed, starts their result) */
            if (docs && !cp_block_spans(b, docs->seg_host, g->rank, s, B, T)) continue;
            int h = b->q_row == 0 ? 0 : 1;
            const void *q = dt_at(qkv, (size_t)b->q_row * C3, t), *kv = dt_at(cur, (size_t)b->k_row * C2, t);
            const int *qs, *ks;
            block_segs(docs, b, g->rank, s, (size_t)N, &qs, &ks);
            if (!init[h]) {
                ops->attention_block_forward(out + (size_t)b->q_row * C, lse + b->q_row, q, kv, qs, ks, B, T,
                                             b->q_rows, b->k_rows, C, NH, NKV, b->causal, b->shift, t, DT_F32);
                init[h] = 1;
                if (b->q_rows == T) init[1] = 1;
                continue;
            }
            ops->attention_block_forward(g->pout + (size_t)b->q_row * C, g->plse + b->q_row, q, kv, qs, ks, B, T,
                                         b->q_rows, b->k_rows, C, NH, NKV, b->causal, b->shift, t, DT_F32);
            ops->attention_block_merge(out + (size_t)b->q_row * C, lse + b->q_row, g->pout + (size_t)b->q_row * C,
                                       g->plse + b->q_row, B, T, b->q_rows, C, NH);
        }
        xfer_wait(g, &x, "cp ring: kv");
        float *tmp = cur;
        cur = nxt, nxt = tmp;
    }
    if (t != DT_F32) ops->to_bf16(out_t, out, (size_t)N * (size_t)C);
}

static void ring_backward(void *ctx, float *dqkv, float *scratch, const float *dout, const void *qkv,
                          const void *out, const void *lse_v, const model_docs *docs, int B, int T, int C, int NH,
                          int NKV, int causal, dt_dtype t)
{
    cp_ring *g = ctx;
    const dt_ops *ops = g->ops;
    (void)scratch;
    check_fits(g, B, T, C, NH, NKV);
    const float *lse = lse_v;
    size_t N = (size_t)B * (size_t)T, C2 = (size_t)dt_kv_cols(C, NH, NKV), C3 = (size_t)dt_qkv_cols(C, NH, NKV);
    size_t half = g->cap_rows * g->cap_k2;
    float *cur = g->buf[0], *nxt = g->buf[1];
    ops->rows_copy(cur, (int)C2, dt_at(qkv, (size_t)C, t), (int)C3, (int)N, (int)C2, 0, t);
    ops->zero(cur + half, N * C2 * sizeof(float));
    for (int i = 0; i < g->size; i++) {
        int s = (g->rank - i + g->size) % g->size;
        cp_xfer x = {NULL, NULL};
        if (i < g->size - 1) x = xfer_start(g, cur, nxt, N * C2, t, "cp ring: kv (backward)");
        cp_block blk[4];
        int nb = cp_blocks(g->rank, s, g->size, T, causal, blk);
        for (int k = 0; k < nb; k++) {
            const cp_block *b = &blk[k];
            if (docs && !cp_block_spans(b, docs->seg_host, g->rank, s, B, T)) continue; /* as in forward */
            const int *qs, *ks;
            block_segs(docs, b, g->rank, s, N, &qs, &ks);
            ops->attention_block_backward(dqkv + (size_t)b->q_row * C3, cur + half + (size_t)b->k_row * C2,
                                          dout + (size_t)b->q_row * C, dt_at(out, (size_t)b->q_row * C, t),
                                          lse + b->q_row, dt_at(qkv, (size_t)b->q_row * C3, t),
                                          dt_at(cur, (size_t)b->k_row * C2, t), qs, ks, B, T, b->q_rows, b->k_rows,
                                          C, NH, NKV, b->causal, b->shift, t);
        }
        xfer_wait(g, &x, "cp ring: kv (backward)");
        /* this kv's gradient goes on with it; after the last step it reaches its owner */
        x = xfer_start(g, cur + half, nxt + half, N * C2, DT_F32, "cp ring: dkv");
        xfer_wait(g, &x, "cp ring: dkv");
        float *tmp = cur;
        cur = nxt, nxt = tmp;
    }
    ops->rows_copy(dqkv + C, (int)C3, cur + half, (int)C2, (int)N, (int)C2, 1, DT_F32);
}

int cp_apply(strat_ctx *x, model *const *chunks, int n_chunks)
{
    const job_spec *job = x->job;
    int cp = job->parallel.cp, tp = job->parallel.tp;
    cp_ring *g = calloc(1, sizeof *g);
    if (!g) return -1;
    size_t numel = sizes_cp_ring_numel(x->sz);
    g->x = x;
    g->ops = x->ops;
    g->c = x->cp;
    g->rank = comm_rank(x->cp);
    g->size = cp;
    g->next = (g->rank + 1) % cp;
    g->prev = (g->rank + cp - 1) % cp;
    g->cap_rows = (size_t)job->train.micro_batch * (size_t)(job->model.seq_len / cp);
    g->cap_cols = (size_t)(job->model.d_model / tp);
    g->cap_k2 = (size_t)dt_kv_cols((int)g->cap_cols, job->model.n_head / tp, model_kv_heads_local(&job->model, tp));
    g->cap_lse = g->cap_rows * (size_t)(job->model.n_head / tp);
    size_t per_row = g->cap_k2 + (g->cap_k2 > g->cap_cols ? g->cap_k2 : g->cap_cols);
    if (!(g->mem = x->ops->alloc(numel * sizeof(float)))) {
        free(g);
        return -1;
    }
    /* the order sizes_cp_ring_numel counts them in */
    g->buf[0] = g->mem;
    g->buf[1] = g->buf[0] + g->cap_rows * per_row;
    g->pout = g->buf[1] + g->cap_rows * per_row;
    g->plse = g->pout + g->cap_rows * g->cap_cols;
    acct_add(x->acct, ACCT_BUFFERS, (long long)(numel * sizeof(float)));
    x->cpr = g;
    model_attention att = {.ctx = g, .forward = ring_forward, .backward = ring_backward};
    for (int i = 0; i < n_chunks; i++) model_set_attention(chunks[i], &att);
    return 0;
}

void cp_release(strat_ctx *x)
{
    cp_ring *g = x->cpr;
    if (!g) return;
    acct_add(x->acct, ACCT_BUFFERS, -(long long)(sizes_cp_ring_numel(x->sz) * sizeof(float)));
    x->ops->free(g->mem);
    free(g);
    x->cpr = NULL;
}
