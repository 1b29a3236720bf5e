/* test_ops_twin.c — every CUDA op against its CPU twin ("every kernel has a
 * twin", DESIGN.md), then 50-step GPT and ViT training runs (fp32 and bf16) on the CUDA
 * backend whose losses must follow the CPU run's.
 *
 * Each op runs on the same random inputs through dt_ops_cpu (host memory) and
 * dt_ops_cuda() (device memory, copied back); outputs that the contract
 * accumulates into start from the same random values on both sides, so "+="
 * is checked too. Shapes include odd sizes (not multiples of 32 or 4), rows
 * that do not fill a warp, and pointers offset by one float (unaligned for
 * cuBLASLt's fast paths).
 *
 * Error measure, per output tensor: max |gpu - cpu| / max |cpu| (norm-wise,
 * as test_model.c does). Tolerances, all fp32 (the CUDA backend is fp32-only
 * for now, GEMMs without TF32):
 *   TOL_EXACT 1e-6  same arithmetic in the same order (copies, embedding,
 *                   position add, residual, scale): only FMA contraction may
 *                   differ
 *   TOL_ELEM  1e-5  elementwise math with libm vs CUDA expf/tanhf/logf/sqrtf
 *                   (each within 2 ulp) and reductions in another order
 *                   (layernorm, cross-entropy, GELU, AdamW)
 *   TOL_GEMM  1e-4  GEMM-based ops (matmul, patch, attention): cuBLAS and
 *                   OpenBLAS sum K products in different orders; the error
 *                   grows like sqrt(K) ulp of the terms
 *   TOL_TF32  5e-3  one matmul with TF32 switched on (10-bit mantissa)
 *   bf16 products (set_bf16_products, mixed precision's GEMMs on bf16
 *   tensor cores): with every operand a bf16 value, as mixed precision
 *   stores them, narrowing is exact and each product of two 8-bit mantissas
 *   is exact in fp32, so the fp32 accumulation leaves TOL_GEMM; with fp32
 *   operands (a gradient flowing back) each is rounded once, a relative
 *   2^-9 per element, 2^-8 per product at worst: TOL_BF16 8e-3
 *   TOL_ATT_BF16 2e-2  blockwise attention on bf16 tensor cores
 *                   (dt_ops_cuda_set_bf16) against the CPU's fp32, on
 *                   bf16-valued q, k, v: Q K^T is exact, but P, dO and dS are
 *                   rounded to bf16 (8 significant bits: unit roundoff
 *                   u = 2^-8 = 3.9e-3) before the products P V, dO V^T,
 *                   P^T dO, dS K and dS^T Q. Each output is a sum whose terms
 *                   carry one or two such independent roundings, so its error
 *                   is about u times the size of the sum; relative to the
 *                   tensor's largest value it stays near u (an emulation of
 *                   these kernels on the CPU gave at most 3.5e-3 on these
 *                   shapes). 2e-2 is 5u; a wrong mask, tile or index moves
 *                   outputs by O(1). The row log-sum-exps are fp32 sums of
 *                   exact scores in both modes: TOL_GEMM.
 *   TOL_SUMSQ 1e-12 sum of squares in double on both sides
 * The Llama ops: RMSNorm (and the fused residual + RMSNorm) and SwiGLU as
 * layernorm and GELU, TOL_ELEM (res: TOL_EXACT); RoPE has no tolerance: its
 * table is computed on the host for both backends and each output is two
 * rounded products and their rounded sum on both sides (ops.h), so the
 * table, the forward (fp32 and bf16) and the backward agree bit for bit.
 * Grouped-query attention (NKV < NH) takes the attention tolerances above.
 * The device-scalar ops of train.cuda_graphs (loss_sum_add, loss_seed,
 * sumsq_add, scalar_add, clip_scale, scale_dev, adamw_multi_dev, adamw_mixed_multi_dev)
 * are host code or host-scalar ops done on the device: bit for bit against
 * those; a recorded graph against the same ops issued: bit for bit.
 *   TOL_STEP1 1e-4  the first step's loss (same initial weights, no update
 *                   yet: the whole forward through every op)
 *   TOL_TRAIN 5e-3  per-step loss, relative, over 50 AdamW steps (rounding
 *                   differences grow through the updates: Adam divides by
 *                   sqrt(v), which amplifies them where gradients are tiny; a
 *                   wrong kernel moves the loss by far more within a step or
 *                   two). Measured on the CPU against itself with other GEMM
 *                   splits (1 thread against 2): at most 1e-5 over the 50
 *                   steps of these models, fp32.
 *   TOL_STEP1_BF16 1e-3, TOL_TRAIN_BF16 3e-2  the same runs in bf16 mixed
 *                   precision (bf16 weights and activations, tensor-core
 *                   products): the first loss through every op, whose
 *                   roundings land on neighbouring bf16 values where the two
 *                   sides' fp32 sums differ in order (one ulp, 2^-8, on a few
 *                   elements: far below 1e-3 of the loss); then, as the
 *                   updates amplify those flips, the per-step loss: the CPU
 *                   against itself with other GEMM splits reaches 6.2e-3
 *                   (ViT, step 45; GPT 2.9e-4), so 3e-2 leaves the device's
 *                   other orders room, and a wrong bf16 kernel still moves
 *                   the loss by more (a missed rounding or a wrong operand
 *                   type: O(1) within a few steps).
 * The bf16 conversions have no tolerance: they must agree bit for bit.
 * Prints "ok - ..." / "not ok - ..." lines (test/gpu/run.sh counts them). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/ops_cuda.h"
#include "kernels/ops.h"
#include "runtime/model/model.h"
#include "runtime/rng.h"
#include "runtime/optim/optim.h"
#include "test/unit/check.h"

#define TOL_EXACT 1e-6
#define TOL_ELEM 1e-5
#define TOL_GEMM 1e-4
#define TOL_TF32 5e-3
#define TOL_BF16 8e-3
#define TOL_ATT_BF16 2e-2
#define TOL_SUMSQ 1e-12
#define TOL_STEP1 1e-4
#define TOL_TRAIN 5e-3
#define TOL_STEP1_BF16 1e-3
#define TOL_TRAIN_BF16 3e-2

static const dt_ops *cpu = &dt_ops_cpu;
static const dt_ops *gpu;

/* The CUDA-only entry points exist only in a build with the backend; without
 * it dt_ops_cuda() is NULL and main() skips before any of these runs. */
#ifdef DTRUN_CUDA
static void set_tf32(int on) { dt_ops_cuda_set_tf32(on); }
static void set_bf16(int on) { dt_ops_cuda_set_bf16(on); }
static const char *device_name(void) { return dt_ops_cuda_device_name(); }
#else
static void set_tf32(int on) { (void)on; }
static void set_bf16(int on) { (void)on; }
static const char *device_name(void) { return ""; }
#endif

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static float frand(void) { /* uniform in [-1, 1), xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (float)((r >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

/* 1: random inputs are bf16 values (what mixed precision stores) */
static int bf16_values;

static float *hrand(size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    if (bf16_values) cpu->round_bf16(p, n);
    return p;
}

/* A device copy of a host array, with `pad` spare floats in front so a test
 * can hand out a pointer that is only 4-byte aligned (pad = 1). */
typedef struct {
    void *base;
    float *p;
} dbuf;

/* n elements of e bytes from host h into a new device buffer (*base), `pad`
 * spare elements in front; returns where the copy starts. */
static void *dup_padded(void **base, const void *h, size_t n, size_t e, int pad) {
    *base = gpu->alloc((n + (size_t)pad) * e);
    void *p = (char *)*base + (size_t)pad * e;
    if (n) gpu->from_host(p, h, n * e);
    return p;
}

static dbuf dup_f(const float *h, size_t n, int pad) {
    dbuf d;
    d.p = dup_padded(&d.base, h, n, sizeof(float), pad);
    return d;
}

/* n zeroed device floats (alloc zeroes). */
static dbuf zeros_f(size_t n) {
    dbuf d;
    d.base = gpu->alloc((n ? n : 1) * sizeof(float));
    d.p = (float *)d.base;
    return d;
}

static int *dup_i(const int *h, size_t n) {
    int *d = gpu->alloc((n ? n : 1) * sizeof(int));
    if (n) gpu->from_host(d, h, n * sizeof(int));
    return d;
}

static float *back(const dbuf *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    if (n) gpu->to_host(h, d->p, n * sizeof(float));
    return h;
}

static double rel_err(const float *a, const float *ref, size_t n) {
    double maxdiff = 0, maxref = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= maxdiff)) maxdiff = d; /* NaN sticks */
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    return maxdiff / maxref;
}

/* Compares device tensor d (n floats) with host reference ref. */
static void expect(const char *what, const dbuf *d, const float *ref, size_t n, double tol) {
    float *h = back(d, n);
    double e = rel_err(h, ref, n);
    CHECK(e <= tol, "%s: max rel err %.2e <= %.0e", what, e, tol);
    free(h);
}

static void drop(dbuf *d) { gpu->free(d->base); }

/* ---------------------------------------------------------------- memory */

static void test_memory(void) {
    size_t n = 1000;
    float *z = gpu->alloc(n * sizeof(float));
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = 1.0f;
    gpu->to_host(h, z, n * sizeof(float));
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= h[i] == 0.0f;
    CHECK(z && zero, "memory: alloc returns zeroed device memory");
    void *empty = gpu->alloc(0);
    CHECK(empty != NULL, "memory: alloc(0) returns a valid pointer (NULL means failure)");
    gpu->free(empty);

    float *src = hrand(n, 1.0f);
    float *y = gpu->alloc(n * sizeof(float));
    gpu->from_host(z, src, n * sizeof(float));
    gpu->copy(y + 1, z, (n - 1) * sizeof(float)); /* unaligned destination */
    gpu->zero(y + 500, 10 * sizeof(float));
    gpu->to_host(h, y, n * sizeof(float));
    int ok = h[0] == 0.0f;
    for (size_t i = 1; i < n; i++) {
        float want = (i >= 500 && i < 510) ? 0.0f : src[i - 1];
        ok &= h[i] == want;
    }
    CHECK(ok, "memory: from_host, copy (offset), zero (range), to_host round trip");

    /* stream-ordered memory (an MoE block's expert rows): usable by the ops
     * queued after it, given back behind the ops queued before; a freed
     * buffer's memory serves the next one (the pool keeps it) */
    for (int round = 0; round < 3; round++) {
        float *o = gpu->alloc_ordered(n * sizeof(float));
        gpu->copy(o, z, n * sizeof(float));
        gpu->scale(o, 3.0f, n);
        gpu->to_host(h, o, n * sizeof(float));
        gpu->free_ordered(o);
        ok = o != NULL;
        for (size_t i = 0; i < n; i++) ok &= h[i] == 3.0f * src[i];
        CHECK(ok, "memory: alloc_ordered round %d: copy and scale into it, free_ordered behind them", round);
    }

    /* the copy queue (train.offload): a copy starts behind the compute queued
     * before it, and what is queued after copy_finish sees it */
    float *pin = gpu->host_alloc(n * sizeof(float)), *back_h = gpu->host_alloc(n * sizeof(float));
    gpu->zero(y, n * sizeof(float));
    gpu->copy(y, z, n * sizeof(float));                        /* compute-queue work ... */
    void *down = gpu->copy_start(pin, y, n * sizeof(float));   /* ... that the copy follows */
    gpu->copy_finish(down);
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= pin[i] == src[i];
    CHECK(same, "memory: copy_start device to pinned host after queued compute, copy_finish waits for it");
    for (size_t i = 0; i < n; i++) pin[i] = (float)i;
    void *up = gpu->copy_start(y, pin, n * sizeof(float));
    gpu->copy_finish(up);
    gpu->scale(y, 2.0f, n);                                    /* compute after the copy */
    gpu->to_host(back_h, y, n * sizeof(float));
    same = 1;
    for (size_t i = 0; i < n; i++) same &= back_h[i] == 2.0f * (float)i;
    CHECK(same, "memory: copy_start pinned host to device, compute queued after copy_finish sees it");
    gpu->copy_finish(NULL);
    gpu->host_free(pin);
    gpu->host_free(back_h);
    gpu->free(z);
    gpu->free(y);
    free(h);
    free(src);
}

/* ---------------------------------------------------------------- embeddings */

static void test_embedding(int N, int C, int V, int v0, int vn) {
    char what[128];
    int *tok = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = (int)((frand() + 1.0f) * 0.5f * V) % V;
    tok[0] = tok[N - 1] = v0; /* a shared row: the scatter-add must sum */
    float *wte = hrand((size_t)vn * C, 1.0f);
    float *out_c = hrand((size_t)N * C, 1.0f);
    int *dtok = dup_i(tok, (size_t)N);
    dbuf dwte = dup_f(wte, (size_t)vn * C, 0), dout = dup_f(out_c, (size_t)N * C, 0);
    cpu->embedding_forward(out_c, tok, wte, v0, vn, N, C);
    gpu->embedding_forward(dout.p, dtok, dwte.p, v0, vn, N, C);
    snprintf(what, sizeof what, "embedding_forward N=%d C=%d rows [%d,%d)", N, C, v0, v0 + vn);
    expect(what, &dout, out_c, (size_t)N * C, TOL_EXACT);

    float *g = hrand((size_t)N * C, 1.0f), *dw_c = hrand((size_t)vn * C, 1.0f);
    dbuf dg = dup_f(g, (size_t)N * C, 0), ddw = dup_f(dw_c, (size_t)vn * C, 0);
    cpu->embedding_backward(dw_c, g, tok, v0, vn, N, C);
    gpu->embedding_backward(ddw.p, dg.p, dtok, v0, vn, N, C);
    snprintf(what, sizeof what, "embedding_backward N=%d C=%d (accumulates, repeated rows)", N, C);
    expect(what, &ddw, dw_c, (size_t)vn * C, TOL_EXACT);

    drop(&dwte); drop(&dout); drop(&dg); drop(&ddw);
    gpu->free(dtok);
    free(tok); free(wte); free(out_c); free(g); free(dw_c);
}

/* Document masking (ops.h: segment ids of packed samples) for the blockwise
 * twins: the query rows' and the key rows' ids, on the host and the device,
 * or all NULL (no mask). Runs of lengths that cycle through a list with
 * samples of 1 to 200 rows, the keys' shifted against the queries' (their
 * boundaries fall elsewhere), so tiles hold several samples, samples span
 * tiles, and some tiles see no key of their rows' samples. */
typedef struct {
    int *hq, *hk;
    int *dq, *dk;
} packed_segs;

static int *seg_runs(int B, int Ts, int off) {
    static const int lens[] = {37, 5, 100, 1, 64, 200, 13, 2, 70};
    int n = (int)(sizeof lens / sizeof lens[0]);
    int *s = malloc((size_t)B * Ts * sizeof(int));
    for (int b = 0; b < B; b++) {
        int id = 0, k = b % n, left = lens[k] - off % lens[k];
        for (int i = 0; i < Ts; i++) {
            if (left == 0) id++, k = (k + 1) % n, left = lens[k];
            s[(size_t)b * Ts + i] = id;
            left--;
        }
    }
    return s;
}

static packed_segs packed_make(int packed, int B, int Ts) {
    packed_segs p = {NULL, NULL, NULL, NULL};
    if (!packed) return p;
    size_t n = (size_t)B * Ts;
    p.hq = seg_runs(B, Ts, 0);
    p.hk = seg_runs(B, Ts, 17);
    p.dq = gpu->alloc(n * sizeof(int));
    p.dk = gpu->alloc(n * sizeof(int));
    gpu->from_host(p.dq, p.hq, n * sizeof(int));
    gpu->from_host(p.dk, p.hk, n * sizeof(int));
    return p;
}

static void packed_free(packed_segs *p) {
    if (!p->hq) return;
    gpu->free(p->dq), gpu->free(p->dk);
    free(p->hq), free(p->hk);
}

/* pos: per-row positions (packed samples restarting at 0, runs of 1 to 200
 * rows), or the plain form */
static void posadd_case(int B, int T, int C, int packed) {
    char what[160];
    size_t n = (size_t)B * T * C, tc = (size_t)T * C;
    float *x = hrand(n, 1.0f), *wpe = hrand(tc, 1.0f);
    dbuf dx = dup_f(x, n, 0), dwpe = dup_f(wpe, tc, 0);
    int *pos = NULL, *dpos = NULL;
    if (packed) { /* each row's place in its run */
        int *seg = seg_runs(B, T, 5);
        pos = malloc((size_t)B * T * sizeof(int));
        for (size_t i = 0; i < (size_t)B * T; i++)
            pos[i] = i % (size_t)T && seg[i] == seg[i - 1] ? pos[i - 1] + 1 : 0;
        free(seg);
        dpos = gpu->alloc((size_t)B * T * sizeof(int));
        gpu->from_host(dpos, pos, (size_t)B * T * sizeof(int));
    }
    const char *how = packed ? " with positions" : "";
    cpu->posadd_forward(x, wpe, pos, B, T, C);
    gpu->posadd_forward(dx.p, dwpe.p, dpos, B, T, C);
    snprintf(what, sizeof what, "posadd_forward%s B=%d T=%d C=%d", how, B, T, C);
    expect(what, &dx, x, n, TOL_EXACT);
    float *g = hrand(n, 1.0f);
    dbuf dg = dup_f(g, n, 0);
    cpu->posadd_backward(wpe, g, pos, B, T, C);
    gpu->posadd_backward(dwpe.p, dg.p, dpos, B, T, C);
    snprintf(what, sizeof what, "posadd_backward%s B=%d T=%d C=%d (accumulates)", how, B, T, C);
    expect(what, &dwpe, wpe, tc, TOL_EXACT);
    drop(&dx); drop(&dwpe); drop(&dg);
    if (dpos) gpu->free(dpos);
    free(x); free(wpe); free(g); free(pos);
}

static void test_posadd(int B, int T, int C) {
    posadd_case(B, T, C, 0);
    posadd_case(B, T, C, 1);
}

static void test_patch(int B, int ch, int S, int P, int C) {
    char what[128];
    int G = S / P, K = ch * P * P;
    size_t nimg = (size_t)B * ch * S * S, nout = (size_t)B * G * G * C, nw = (size_t)C * K;
    float *img = hrand(nimg, 1.0f), *w = hrand(nw, 0.5f), *b = hrand((size_t)C, 0.5f);
    float *out = hrand(nout, 1.0f);
    dbuf dimg = dup_f(img, nimg, 0), dw = dup_f(w, nw, 0), db = dup_f(b, (size_t)C, 0);
    dbuf dout = dup_f(out, nout, 0);
    cpu->patch_forward(out, img, w, b, B, ch, S, P, C);
    gpu->patch_forward(dout.p, dimg.p, dw.p, db.p, B, ch, S, P, C);
    snprintf(what, sizeof what, "patch_forward B=%d ch=%d S=%d P=%d C=%d", B, ch, S, P, C);
    expect(what, &dout, out, nout, TOL_GEMM);
    float *g = hrand(nout, 1.0f);
    dbuf dg = dup_f(g, nout, 0);
    cpu->patch_backward(w, b, g, img, B, ch, S, P, C); /* w, b hold dw, db now */
    gpu->patch_backward(dw.p, db.p, dg.p, dimg.p, B, ch, S, P, C);
    snprintf(what, sizeof what, "patch_backward dw B=%d ch=%d S=%d P=%d C=%d", B, ch, S, P, C);
    expect(what, &dw, w, nw, TOL_GEMM);
    snprintf(what, sizeof what, "patch_backward db B=%d ch=%d S=%d P=%d C=%d", B, ch, S, P, C);
    expect(what, &db, b, (size_t)C, TOL_GEMM);
    drop(&dimg); drop(&dw); drop(&db); drop(&dout); drop(&dg);
    free(img); free(w); free(b); free(out); free(g);
}

/* ---------------------------------------------------------------- layernorm */

static void test_layernorm(int N, int C) {
    char what[128];
    size_t n = (size_t)N * C;
    float *x = hrand(n, 2.0f), *w = hrand((size_t)C, 1.0f), *b = hrand((size_t)C, 1.0f);
    for (int i = 0; i < N; i++) x[(size_t)i * C] += 3.0f; /* a mean away from 0 */
    float *out = hrand(n, 1.0f), *mean = hrand((size_t)N, 1.0f), *rstd = hrand((size_t)N, 1.0f);
    dbuf dx = dup_f(x, n, 0), dw = dup_f(w, (size_t)C, 0), db = dup_f(b, (size_t)C, 0);
    dbuf dout = dup_f(out, n, 0), dmean = dup_f(mean, (size_t)N, 0), drstd = dup_f(rstd, (size_t)N, 0);
    float eps = N % 2 ? 1e-12f : 1e-5f; /* HF ViT's and GPT-2's */
    cpu->layernorm_forward(out, mean, rstd, x, w, b, N, C, eps, DT_F32);
    gpu->layernorm_forward(dout.p, dmean.p, drstd.p, dx.p, dw.p, db.p, N, C, eps, DT_F32);
    snprintf(what, sizeof what, "layernorm_forward out N=%d C=%d eps %g", N, C, eps);
    expect(what, &dout, out, n, TOL_ELEM);
    snprintf(what, sizeof what, "layernorm_forward mean, rstd N=%d C=%d", N, C);
    float *hm = back(&dmean, (size_t)N), *hr = back(&drstd, (size_t)N);
    double e = fmax(rel_err(hm, mean, (size_t)N), rel_err(hr, rstd, (size_t)N));
    CHECK(e <= TOL_ELEM, "%s: max rel err %.2e <= %.0e", what, e, TOL_ELEM);
    free(hm); free(hr);

    float *g = hrand(n, 1.0f), *dxi = hrand(n, 1.0f);
    float *gw = hrand((size_t)C, 1.0f), *gb = hrand((size_t)C, 1.0f);
    dbuf dg = dup_f(g, n, 0), ddx = dup_f(dxi, n, 0), dgw = dup_f(gw, (size_t)C, 0),
         dgb = dup_f(gb, (size_t)C, 0);
    /* both sides from the CPU's mean and rstd, so backward is tested alone */
    gpu->from_host(dmean.p, mean, (size_t)N * sizeof(float));
    gpu->from_host(drstd.p, rstd, (size_t)N * sizeof(float));
    cpu->layernorm_backward(dxi, gw, gb, g, x, w, mean, rstd, N, C, DT_F32);
    gpu->layernorm_backward(ddx.p, dgw.p, dgb.p, dg.p, dx.p, dw.p, dmean.p, drstd.p, N, C, DT_F32);
    snprintf(what, sizeof what, "layernorm_backward dinp N=%d C=%d (accumulates)", N, C);
    expect(what, &ddx, dxi, n, TOL_ELEM);
    snprintf(what, sizeof what, "layernorm_backward dw N=%d C=%d", N, C);
    expect(what, &dgw, gw, (size_t)C, TOL_ELEM);
    snprintf(what, sizeof what, "layernorm_backward db N=%d C=%d", N, C);
    expect(what, &dgb, gb, (size_t)C, TOL_ELEM);
    drop(&dx); drop(&dw); drop(&db); drop(&dout); drop(&dmean); drop(&drstd);
    drop(&dg); drop(&ddx); drop(&dgw); drop(&dgb);
    free(x); free(w); free(b); free(out); free(mean); free(rstd);
    free(g); free(dxi); free(gw); free(gb);
}

/* ---------------------------------------------------------------- matmul */

/* pad = 1 offsets every device pointer by one float (4-byte alignment). */
static void test_matmul(int N, int IC, int OC, int with_bias, int pad, double tol) {
    char what[160];
    const char *tag = pad ? " unaligned" : "";
    float *inp = hrand((size_t)N * IC, 1.0f), *w = hrand((size_t)OC * IC, 1.0f);
    float *bias = hrand((size_t)OC, 1.0f), *out = hrand((size_t)N * OC, 1.0f);
    dbuf di = dup_f(inp, (size_t)N * IC, pad), dw = dup_f(w, (size_t)OC * IC, pad);
    dbuf db = dup_f(bias, (size_t)OC, pad), dout = dup_f(out, (size_t)N * OC, pad);
    cpu->matmul_forward(out, inp, w, with_bias ? bias : NULL, N, IC, OC, DT_F32, DT_F32);
    gpu->matmul_forward(dout.p, di.p, dw.p, with_bias ? db.p : NULL, N, IC, OC, DT_F32, DT_F32);
    snprintf(what, sizeof what, "matmul_forward N=%d IC=%d OC=%d%s%s", N, IC, OC,
             with_bias ? " +bias" : "", tag);
    expect(what, &dout, out, (size_t)N * OC, tol);

    float *g = hrand((size_t)N * OC, 1.0f), *gi = hrand((size_t)N * IC, 1.0f);
    float *gw = hrand((size_t)OC * IC, 1.0f), *gb = hrand((size_t)OC, 1.0f);
    dbuf dg = dup_f(g, (size_t)N * OC, pad), dgi = dup_f(gi, (size_t)N * IC, pad);
    dbuf dgw = dup_f(gw, (size_t)OC * IC, pad), dgb = dup_f(gb, (size_t)OC, pad);
    /* with_bias also picks whether dinp and dbias are wanted (both NULL-able) */
    cpu->matmul_backward(with_bias ? gi : NULL, gw, with_bias ? gb : NULL, g, inp, w, N, IC, OC, DT_F32);
    gpu->matmul_backward(with_bias ? dgi.p : NULL, dgw.p, with_bias ? dgb.p : NULL, dg.p, di.p,
                         dw.p, N, IC, OC, DT_F32);
    if (with_bias) {
        snprintf(what, sizeof what, "matmul_backward dinp N=%d IC=%d OC=%d%s", N, IC, OC, tag);
        expect(what, &dgi, gi, (size_t)N * IC, tol);
        snprintf(what, sizeof what, "matmul_backward dbias N=%d IC=%d OC=%d%s", N, IC, OC, tag);
        expect(what, &dgb, gb, (size_t)OC, TOL_ELEM * 10);
    }
    snprintf(what, sizeof what, "matmul_backward dw N=%d IC=%d OC=%d%s%s", N, IC, OC,
             with_bias ? "" : " (dinp, dbias NULL)", tag);
    expect(what, &dgw, gw, (size_t)OC * IC, tol);
    if (with_bias) {
        /* a zero-bubble pipeline's B (dinp alone) then W (dw, dbias alone): bitwise
         * the combined call on the device too, from the same starting values */
        float *h_gi = hrand((size_t)N * IC, 1.0f), *h_gw = hrand((size_t)OC * IC, 1.0f), *h_gb = hrand((size_t)OC, 1.0f);
        dbuf a_gi = dup_f(h_gi, (size_t)N * IC, pad), a_gw = dup_f(h_gw, (size_t)OC * IC, pad), a_gb = dup_f(h_gb, (size_t)OC, pad);
        dbuf s_gi = dup_f(h_gi, (size_t)N * IC, pad), s_gw = dup_f(h_gw, (size_t)OC * IC, pad), s_gb = dup_f(h_gb, (size_t)OC, pad);
        gpu->matmul_backward(a_gi.p, a_gw.p, a_gb.p, dg.p, di.p, dw.p, N, IC, OC, DT_F32);
        gpu->matmul_backward(s_gi.p, NULL, NULL, dg.p, NULL, dw.p, N, IC, OC, DT_F32);
        gpu->matmul_backward(NULL, s_gw.p, s_gb.p, dg.p, di.p, NULL, N, IC, OC, DT_F32);
        float *r[6] = {back(&a_gi, (size_t)N * IC), back(&a_gw, (size_t)OC * IC), back(&a_gb, (size_t)OC),
                       back(&s_gi, (size_t)N * IC), back(&s_gw, (size_t)OC * IC), back(&s_gb, (size_t)OC)};
        snprintf(what, sizeof what, "matmul_backward N=%d IC=%d OC=%d%s split into dinp alone, then dw + dbias", N, IC, OC, tag);
        CHECK(memcmp(r[0], r[3], (size_t)N * IC * sizeof(float)) == 0 &&
                  memcmp(r[1], r[4], (size_t)OC * IC * sizeof(float)) == 0 && memcmp(r[2], r[5], (size_t)OC * sizeof(float)) == 0,
              "%s: bitwise the combined call", what);
        for (int i = 0; i < 6; i++) free(r[i]);
        drop(&a_gi); drop(&a_gw); drop(&a_gb); drop(&s_gi); drop(&s_gw); drop(&s_gb);
        free(h_gi); free(h_gw); free(h_gb);
    }
    drop(&di); drop(&dw); drop(&db); drop(&dout); drop(&dg); drop(&dgi); drop(&dgw); drop(&dgb);
    free(inp); free(w); free(bias); free(out); free(g); free(gi); free(gw); free(gb);
}

/* The fused first MLP layer (GELU in the GEMM's epilogue on cuda) against
 * the CPU's matmul then gelu: pre within the GEMM tolerance, the GELU of it
 * adds one elementwise function. */
static void test_matmul_gelu(int N, int IC, int OC, int with_bias, int pad) {
    char what[160];
    float *inp = hrand((size_t)N * IC, 1.0f), *w = hrand((size_t)OC * IC, 1.0f), *bias = hrand((size_t)OC, 1.0f);
    float *out = hrand((size_t)N * OC, 1.0f), *pre = hrand((size_t)N * OC, 1.0f);
    dbuf di = dup_f(inp, (size_t)N * IC, pad), dw = dup_f(w, (size_t)OC * IC, pad), db = dup_f(bias, (size_t)OC, pad);
    dbuf dout = dup_f(out, (size_t)N * OC, pad), dpre = dup_f(pre, (size_t)N * OC, pad);
    cpu->matmul_gelu_forward(out, pre, inp, w, with_bias ? bias : NULL, N, IC, OC, DT_F32);
    gpu->matmul_gelu_forward(dout.p, dpre.p, di.p, dw.p, with_bias ? db.p : NULL, N, IC, OC, DT_F32);
    snprintf(what, sizeof what, "matmul_gelu_forward pre N=%d IC=%d OC=%d%s%s", N, IC, OC, with_bias ? " +bias" : "",
             pad ? " unaligned (two ops)" : "");
    expect(what, &dpre, pre, (size_t)N * OC, TOL_GEMM);
    snprintf(what, sizeof what, "matmul_gelu_forward out N=%d IC=%d OC=%d%s%s", N, IC, OC, with_bias ? " +bias" : "",
             pad ? " unaligned (two ops)" : "");
    expect(what, &dout, out, (size_t)N * OC, TOL_GEMM);
    drop(&di); drop(&dw); drop(&db); drop(&dout); drop(&dpre);
    free(inp); free(w); free(bias); free(out); free(pre);
}

/* Its backward mirror: dpre = (dout @ w) * gelu'(pre) through the DGELU
 * epilogue (or the GEMM into the scratch and the GELU's backward): one GEMM
 * and one elementwise function, TOL_GEMM. */
static void test_matmul_dgelu(int N, int IC, int OC, int pad) {
    char what[160];
    float *dout = hrand((size_t)N * OC, 1.0f), *w = hrand((size_t)OC * IC, 1.0f), *pre = hrand((size_t)N * IC, 2.0f);
    float *dpre = hrand((size_t)N * IC, 1.0f), *scr = hrand((size_t)N * IC, 1.0f);
    dbuf dd = dup_f(dout, (size_t)N * OC, pad), dw = dup_f(w, (size_t)OC * IC, pad), dp = dup_f(pre, (size_t)N * IC, pad);
    dbuf ddp = dup_f(dpre, (size_t)N * IC, pad), ds = dup_f(scr, (size_t)N * IC, pad);
    cpu->matmul_dgelu_backward(dpre, scr, dout, w, pre, N, IC, OC, DT_F32);
    gpu->matmul_dgelu_backward(ddp.p, ds.p, dd.p, dw.p, dp.p, N, IC, OC, DT_F32);
    snprintf(what, sizeof what, "matmul_dgelu_backward N=%d IC=%d OC=%d%s", N, IC, OC,
             pad || IC % 8 ? " (GEMM, then the GELU's backward)" : "");
    expect(what, &ddp, dpre, (size_t)N * IC, TOL_GEMM);
    drop(&dd); drop(&dw); drop(&dp); drop(&ddp); drop(&ds);
    free(dout); free(w); free(pre); free(dpre); free(scr);
}

/* ---- matmul on activations stored in bf16 (ops.h dt_dtype DT_BF16) ----
 * The CPU twin widens a bf16 operand (exact), computes in fp32 and rounds a
 * bf16 result once when it stores it; cuda multiplies the bf16 operand as
 * stored on the tensor cores (fp32 accumulation) and rounds once into a
 * bf16 D (or, where cuBLASLt refuses a case, rounds its fp32 product with a
 * kernel: the same rounding point). Inputs here are bf16 values (weights and
 * gradients too, as mixed precision keeps its weights), so every product is
 * exact in fp32 on both sides and only the summation order differs: fp32
 * results within TOL_GEMM. A bf16 result is the rounding of an fp32 value
 * that is itself within TOL_GEMM x max|ref| of the CPU's; where the two fp32
 * values straddle a rounding boundary they round to neighbouring bf16
 * values, one ulp apart, and a bf16 ulp is at most 2^-7 of the value (8
 * significant bits: 2^-8 at the top of a binade, 2^-7 at its bottom), so
 * |gpu - cpu| <= TOL_GEMM max|ref| + 2^-7 max|ref|. A wrong operand type,
 * a lost bias or a wrong GELU moves outputs by O(1) of their size. */
/* One bf16 ulp relative to a tensor's largest element (the reasoning above). */
#define TOL_ULP16 7.9e-3 /* 2^-7 = 7.8125e-3 */

static uint16_t *host16(const float *h, size_t n) {
    uint16_t *p = malloc((n ? n : 1) * sizeof(uint16_t));
    cpu->to_bf16(p, h, n);
    return p;
}

static void *dup_bytes(const void *h, size_t bytes) {
    void *base;
    return dup_padded(&base, h, bytes, 1, 0);
}

/* Device tensor d of n elements of type t against host ref (same type),
 * both widened to fp32. */
static void expect_typed(const char *what, const void *d, const void *ref, size_t n, dt_dtype t, double tol) {
    float *a = malloc((n ? n : 1) * sizeof(float)), *r = malloc((n ? n : 1) * sizeof(float));
    if (t == DT_BF16) {
        uint16_t *h = malloc((n ? n : 1) * sizeof(uint16_t));
        if (n) gpu->to_host(h, d, n * sizeof(uint16_t));
        cpu->from_bf16(a, h, n);
        cpu->from_bf16(r, ref, n);
        free(h);
    } else {
        if (n) gpu->to_host(a, d, n * sizeof(float));
        memcpy(r, ref, n * sizeof(float));
    }
    double e = rel_err(a, r, n);
    CHECK(e <= tol, "%s: max rel err %.2e <= %.1e", what, e, tol);
    free(a); free(r);
}

#define TOL_ACT_BF16 (TOL_GEMM + TOL_ULP16)

/* set_bf16_products for the cases below, remembered for their names */
static int act16_b16;
static void act16_products(int on) {
    gpu->set_bf16_products(on);
    act16_b16 = on;
}

/* n bf16 values (random fp32 rounded as the CPU rounds) */
static uint16_t *hrand16(size_t n, float scale) {
    float *f = hrand(n, scale);
    uint16_t *h = host16(f, n);
    free(f);
    return h;
}

/* A device copy of a bf16 array, `pad` spare elements in front (pad = 1: a
 * pointer only 2-byte aligned). */
typedef struct {
    void *base;
    uint16_t *p;
} dbuf16;

static dbuf16 dup_h(const uint16_t *h, size_t n, int pad) {
    dbuf16 d;
    d.p = dup_padded(&d.base, h, n, sizeof(uint16_t), pad);
    return d;
}

/* Compares device bf16 tensor d with the CPU's bf16 ref, both widened. */
static void expect16(const char *what, const dbuf16 *d, const uint16_t *ref, size_t n, double tol) {
    expect_typed(what, d->p, ref, n, DT_BF16, tol);
}

static void drop16(dbuf16 *d) { gpu->free(d->base); }

/* matmul_forward with inp bf16 (out bf16 or fp32), then matmul_backward with
 * inp bf16 (dinp, dw, dbias from random starts: "+="). pad = 1 offsets every
 * device pointer by one element (bf16 ones 2-byte aligned, fp32 4-byte). */
static void test_matmul_act16(int N, int IC, int OC, int with_bias, int pad, dt_dtype out_t) {
    char what[200];
    const char *tag = pad ? " unaligned" : "";
    const char *mode = act16_b16 ? "bf16 products" : "fp32 products";
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    int saved = bf16_values;
    bf16_values = 1;
    uint16_t *inp = hrand16(ni, 1.0f);
    uint16_t *w = hrand16(nw, 1.0f); /* the weights bf16 too (ops.h) */
    float *bias = hrand((size_t)OC, 1.0f);
    dbuf16 di = dup_h(inp, ni, pad);
    dbuf16 dw = dup_h(w, nw, pad);
    dbuf db = dup_f(bias, (size_t)OC, pad);
    float *of = hrand(no, 1.0f);
    void *out = out_t == DT_BF16 ? (void *)host16(of, no) : (void *)of, *obase;
    void *dout = dup_padded(&obase, out, no, dt_dtype_size(out_t), pad);
    cpu->matmul_forward(out, inp, w, with_bias ? bias : NULL, N, IC, OC, DT_BF16, out_t);
    gpu->matmul_forward(dout, di.p, dw.p, with_bias ? db.p : NULL, N, IC, OC, DT_BF16, out_t);
    snprintf(what, sizeof what, "matmul_forward bf16 -> %s N=%d IC=%d OC=%d%s%s (%s)",
             out_t == DT_BF16 ? "bf16" : "fp32", N, IC, OC, with_bias ? " +bias" : "", tag, mode);
    expect_typed(what, dout, out, no, out_t, out_t == DT_BF16 ? TOL_ACT_BF16 : TOL_GEMM);
    gpu->free(obase);
    if (out != of) free(out);
    free(of);

    float *g = hrand(no, 1.0f), *gi = hrand(ni, 1.0f), *gw = hrand(nw, 1.0f), *gb = hrand((size_t)OC, 1.0f);
    dbuf dg = dup_f(g, no, pad), dgi = dup_f(gi, ni, pad), dgw = dup_f(gw, nw, pad), dgb = dup_f(gb, (size_t)OC, pad);
    cpu->matmul_backward(gi, gw, with_bias ? gb : NULL, g, inp, w, N, IC, OC, DT_BF16);
    gpu->matmul_backward(dgi.p, dgw.p, with_bias ? dgb.p : NULL, dg.p, di.p, dw.p, N, IC, OC, DT_BF16);
    snprintf(what, sizeof what, "matmul_backward inp bf16 dinp N=%d IC=%d OC=%d%s (%s)", N, IC, OC, tag, mode);
    expect(what, &dgi, gi, ni, TOL_GEMM);
    snprintf(what, sizeof what, "matmul_backward inp bf16 dw N=%d IC=%d OC=%d%s (%s)", N, IC, OC, tag, mode);
    expect(what, &dgw, gw, nw, TOL_GEMM);
    if (with_bias) {
        snprintf(what, sizeof what, "matmul_backward inp bf16 dbias N=%d IC=%d OC=%d%s (%s)", N, IC, OC, tag, mode);
        expect(what, &dgb, gb, (size_t)OC, TOL_ELEM * 10);
    }
    drop16(&di); drop16(&dw); drop(&db); drop(&dg); drop(&dgi); drop(&dgw); drop(&dgb);
    free(inp); free(w); free(bias); free(g); free(gi); free(gw); free(gb);
    bf16_values = saved;
}

/* matmul_forward with an fp32 input and a bf16 result (the contract allows
 * it; no model layer does it): bf16 of the fp32 op's result. fp32 inputs,
 * so with bf16 products the operands are rounded on the way in: TOL_BF16
 * plus the result's one ulp; with fp32 products TOL_ACT_BF16. */
static void test_matmul_f32_to_act16(int N, int IC, int OC) {
    char what[200];
    int b16 = act16_b16;
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    float *inp = hrand(ni, 1.0f), *w = hrand(nw, 1.0f), *bias = hrand((size_t)OC, 1.0f);
    uint16_t *out = hrand16(no, 1.0f);
    dbuf di = dup_f(inp, ni, 0), dw = dup_f(w, nw, 0), db = dup_f(bias, (size_t)OC, 0);
    dbuf16 dout = dup_h(out, no, 0);
    cpu->matmul_forward(out, inp, w, bias, N, IC, OC, DT_F32, DT_BF16);
    gpu->matmul_forward(dout.p, di.p, dw.p, db.p, N, IC, OC, DT_F32, DT_BF16);
    snprintf(what, sizeof what, "matmul_forward fp32 -> bf16 N=%d IC=%d OC=%d +bias (%s products)", N, IC, OC,
             b16 ? "bf16" : "fp32");
    expect16(what, &dout, out, no, b16 ? TOL_BF16 + 1.0 / 128 : TOL_ACT_BF16);
    drop(&di); drop(&dw); drop(&db); drop16(&dout);
    free(inp); free(w); free(bias); free(out);
}

/* The fused first MLP layer on bf16 activations: pre = bf16(inp @ w^T +
 * bias), out = bf16(gelu of the unrounded value), both TOL_ACT_BF16 (the
 * GELU adds a TOL_ELEM-sized error, and the GELU's slope is at most 1.13, so
 * a TOL_GEMM difference in its input stays one in its output). */
static void test_matmul_gelu_act16(int N, int IC, int OC, int with_bias, int pad) {
    char what[200];
    const char *tag = pad ? " unaligned" : "";
    const char *mode = act16_b16 ? "bf16 products" : "fp32 products";
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    int saved = bf16_values;
    bf16_values = 1;
    uint16_t *inp = hrand16(ni, 1.0f), *out = hrand16(no, 1.0f), *pre = hrand16(no, 1.0f);
    uint16_t *w = hrand16(nw, 1.0f); /* the weights bf16 too (ops.h) */
    float *bias = hrand((size_t)OC, 1.0f);
    dbuf16 di = dup_h(inp, ni, pad), dout = dup_h(out, no, pad), dpre = dup_h(pre, no, pad);
    dbuf16 dw = dup_h(w, nw, pad);
    dbuf db = dup_f(bias, (size_t)OC, pad);
    cpu->matmul_gelu_forward(out, pre, inp, w, with_bias ? bias : NULL, N, IC, OC, DT_BF16);
    gpu->matmul_gelu_forward(dout.p, dpre.p, di.p, dw.p, with_bias ? db.p : NULL, N, IC, OC, DT_BF16);
    snprintf(what, sizeof what, "matmul_gelu_forward bf16 pre N=%d IC=%d OC=%d%s%s (%s)", N, IC, OC,
             with_bias ? " +bias" : "", tag, mode);
    expect16(what, &dpre, pre, no, TOL_ACT_BF16);
    snprintf(what, sizeof what, "matmul_gelu_forward bf16 out N=%d IC=%d OC=%d%s%s (%s)", N, IC, OC,
             with_bias ? " +bias" : "", tag, mode);
    expect16(what, &dout, out, no, TOL_ACT_BF16);
    drop16(&di); drop16(&dout); drop16(&dpre); drop16(&dw); drop(&db);
    free(inp); free(out); free(pre); free(w); free(bias);
    bf16_values = saved;
}

/* Its backward mirror with pre stored in bf16: dpre (fp32) = (dout @ w) x
 * gelu'(pre widened); the DGELU epilogue reading a bf16 aux, or the GEMM
 * then the GELU's backward: one GEMM of bf16 values and one elementwise
 * function, TOL_GEMM as in fp32. */
static void test_matmul_dgelu_act16(int N, int IC, int OC, int pad) {
    char what[200];
    const char *mode = act16_b16 ? "bf16 products" : "fp32 products";
    size_t nd = (size_t)N * OC, np = (size_t)N * IC, nw = (size_t)OC * IC;
    int saved = bf16_values;
    bf16_values = 1;
    float *dout = hrand(nd, 1.0f), *dpre = hrand(np, 1.0f), *scr = hrand(np, 1.0f);
    uint16_t *pre = hrand16(np, 2.0f), *w = hrand16(nw, 1.0f); /* the weights bf16 too (ops.h) */
    dbuf dd = dup_f(dout, nd, pad), ddp = dup_f(dpre, np, pad), ds = dup_f(scr, np, pad);
    dbuf16 dp = dup_h(pre, np, pad), dw = dup_h(w, nw, pad);
    cpu->matmul_dgelu_backward(dpre, scr, dout, w, pre, N, IC, OC, DT_BF16);
    gpu->matmul_dgelu_backward(ddp.p, ds.p, dd.p, dw.p, dp.p, N, IC, OC, DT_BF16);
    snprintf(what, sizeof what, "matmul_dgelu_backward pre bf16 N=%d IC=%d OC=%d%s (%s)", N, IC, OC,
             pad || IC % 8 ? " (GEMM, then the GELU's backward)" : "", mode);
    expect(what, &ddp, dpre, np, TOL_GEMM);
    drop(&dd); drop16(&dw); drop(&ddp); drop(&ds); drop16(&dp);
    free(dout); free(w); free(dpre); free(scr); free(pre);
    bf16_values = saved;
}

/* ---------------------------------------------------------------- attention */

static void test_attention(int B, int T, int C, int NH, int NKV, int causal) {
    char what[160];
    size_t nqkv = (size_t)B * T * dt_qkv_cols(C, NH, NKV), nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = hrand(nqkv, 1.0f), *out = hrand(nout, 1.0f), *att = hrand(natt, 1.0f);
    dbuf dqkv = dup_f(qkv, nqkv, 0), dout = dup_f(out, nout, 0), datt = dup_f(att, natt, 0);
    cpu->attention_forward(out, att, qkv, B, T, C, NH, NKV, causal, DT_F32);
    gpu->attention_forward(dout.p, datt.p, dqkv.p, B, T, C, NH, NKV, causal, DT_F32);
    snprintf(what, sizeof what, "attention_forward out B=%d T=%d C=%d NH=%d NKV=%d %s", B, T, C, NH, NKV,
             causal ? "causal" : "full");
    expect(what, &dout, out, nout, TOL_GEMM);
    snprintf(what, sizeof what, "attention_forward att B=%d T=%d C=%d NH=%d NKV=%d %s", B, T, C, NH, NKV,
             causal ? "causal" : "full");
    expect(what, &datt, att, natt, TOL_GEMM);

    float *g = hrand(nout, 1.0f), *gq = hrand(nqkv, 1.0f);
    float *scratch = malloc(natt * sizeof(float));
    dbuf dg = dup_f(g, nout, 0), dgq = dup_f(gq, nqkv, 0);
    float *dscratch = gpu->alloc(natt * sizeof(float));
    /* both sides from the CPU's probabilities, so backward is tested alone */
    gpu->from_host(datt.p, att, natt * sizeof(float));
    cpu->attention_backward(gq, scratch, g, qkv, att, B, T, C, NH, NKV, causal, DT_F32);
    gpu->attention_backward(dgq.p, dscratch, dg.p, dqkv.p, datt.p, B, T, C, NH, NKV, causal, DT_F32);
    snprintf(what, sizeof what, "attention_backward dqkv B=%d T=%d C=%d NH=%d NKV=%d %s (accumulates)",
             B, T, C, NH, NKV, causal ? "causal" : "full");
    expect(what, &dgq, gq, nqkv, TOL_GEMM);
    drop(&dqkv); drop(&dout); drop(&datt); drop(&dg); drop(&dgq);
    gpu->free(dscratch);
    free(qkv); free(out); free(att); free(g); free(gq); free(scratch);
}

/* |gpu - ref| / max |ref| over the part an accumulating op ADDED (both
 * sides minus the common random start), so a small gradient is not hidden
 * under the start's values. */
static void expect_added(const char *what, const dbuf *d, const float *start, const float *ref, size_t n, double tol) {
    float *h = back(d, n), *r = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        h[i] -= start[i];
        r[i] = ref[i] - start[i];
    }
    double e = rel_err(h, r, n);
    CHECK(e <= tol, "%s: max rel err %.2e <= %.0e", what, e, tol);
    free(h); free(r);
}

/* Row log-sum-exps: -inf (a row that sees no key) must match exactly, a
 * finite one within tol * max(1, |ref|). */
static void expect_lse(const char *what, const dbuf *d, const float *ref, size_t n, double tol) {
    float *h = back(d, n);
    double worst = 0;
    size_t inf_bad = 0, ninf = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i]) || isinf(h[i])) {
            ninf += isinf(ref[i]) != 0;
            inf_bad += h[i] != ref[i];
            continue;
        }
        double e = fabs((double)h[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (!(e <= worst)) worst = e; /* NaN sticks */
    }
    CHECK(inf_bad == 0 && worst <= tol, "%s: max err %.2e <= %.0e, %zu rows -inf, %zu disagree on -inf", what, worst,
          tol, ninf, inf_bad);
    free(h);
}

/* attention_block_backward on both backends from the same final out, lse,
 * q and kv (out, q, kv of type t: host hout, hq, hkv; device dout, dq, dkv;
 * lse host and device), a random output gradient and random starts (it
 * accumulates): dq and dkv within tol of the CPU's, and a second device call
 * from the same starts giving the same bits (no atomics). The CPU's dq stays
 * in *gq and the device's in *dgq (the caller drops them) for what follows. */
static void block_backward_twin(const char *shape, double tol, const void *hout, const void *dout, const float *lse,
                                const float *dlse, const void *hq, const void *hkv, const void *dq, const void *dkv,
                                const packed_segs *ps, int B, int Ts, int Tq, int Tk, int C, int NH, int NKV,
                                int causal, int shift, dt_dtype t, float **gq_out, dbuf *dgq_out) {
    char what[280];
    size_t no = (size_t)B * Ts * C, nq = (size_t)B * Ts * dt_qkv_cols(C, NH, NKV), nkv = (size_t)B * Ts * dt_kv_cols(C, NH, NKV);
    float *g = hrand(no, 1.0f), *gq = hrand(nq, 1.0f), *gkv = hrand(nkv, 1.0f);
    float *gq0 = malloc(nq * sizeof(float)), *gkv0 = malloc(nkv * sizeof(float));
    memcpy(gq0, gq, nq * sizeof(float));
    memcpy(gkv0, gkv, nkv * sizeof(float));
    dbuf dg = dup_f(g, no, 0), dgq = dup_f(gq, nq, 0), dgkv = dup_f(gkv, nkv, 0);
    dbuf dgq2 = dup_f(gq, nq, 0), dgkv2 = dup_f(gkv, nkv, 0);
    cpu->attention_block_backward(gq, gkv, g, hout, lse, hq, hkv, ps->hq, ps->hk, B, Ts, Tq, Tk, C, NH, NKV, causal,
                                  shift, t);
    gpu->attention_block_backward(dgq.p, dgkv.p, dg.p, dout, dlse, dq, dkv, ps->dq, ps->dk, B, Ts, Tq, Tk, C, NH, NKV,
                                  causal, shift, t);
    snprintf(what, sizeof what, "attention_block_backward dq (accumulates) %s", shape);
    expect_added(what, &dgq, gq0, gq, nq, tol);
    snprintf(what, sizeof what, "attention_block_backward dkv (accumulates) %s", shape);
    expect_added(what, &dgkv, gkv0, gkv, nkv, tol);
    gpu->attention_block_backward(dgq2.p, dgkv2.p, dg.p, dout, dlse, dq, dkv, ps->dq, ps->dk, B, Ts, Tq, Tk, C, NH,
                                  NKV, causal, shift, t);
    float *r1 = back(&dgq, nq), *r2 = back(&dgq2, nq), *s1 = back(&dgkv, nkv), *s2 = back(&dgkv2, nkv);
    CHECK(memcmp(r1, r2, nq * sizeof(float)) == 0 && memcmp(s1, s2, nkv * sizeof(float)) == 0,
          "attention_block_backward %s: a second call writes the same bits (no atomics)", shape);
    free(r1); free(r2); free(s1); free(s2);
    /* the k, v gradient added back into dqkv's columns, as the model does */
    int W = dt_qkv_cols(C, NH, NKV), C2 = dt_kv_cols(C, NH, NKV);
    cpu->rows_copy(gq + C, W, gkv, C2, B * Ts, C2, 1, DT_F32);
    gpu->rows_copy(dgq.p + C, W, dgkv.p, C2, B * Ts, C2, 1, DT_F32);
    /* both sides already differ by the backward's rounding: its tolerance */
    snprintf(what, sizeof what, "rows_copy (accumulate into the k, v columns of dqkv) %s", shape);
    expect(what, &dgq, gq, nq, tol);
    drop(&dg); drop(&dgkv); drop(&dgq2); drop(&dgkv2);
    free(g); free(gkv); free(gq0); free(gkv0);
    *gq_out = gq;
    *dgq_out = dgq;
}

/* Blockwise attention (ops.h attention_block_*: the model's attention and
 * context parallelism's ring): a block of Tq queries against Tk keys inside
 * samples of Ts rows, a second block (the keys one block on, shift + Tk)
 * merged into it, and the backward from the merged result; the CUDA twin
 * against the CPU's. bf16: the backend is told its inputs are bf16
 * (dt_ops_cuda_set_bf16) and q, kv are rounded to bf16 values on both sides
 * (as the bf16 model stores qkv); the CPU still computes in fp32, so the
 * difference is the tensor-core path's own rounding (TOL_ATT_BF16). */
static void attention_block_case(int B, int Ts, int Tq, int Tk, int C, int NH, int NKV, int causal, int shift,
                                 int bf16, int packed) {
    char what[260], shape[180];
    double tol = bf16 ? TOL_ATT_BF16 : TOL_GEMM;
    snprintf(shape, sizeof shape, "B=%d Ts=%d Tq=%d Tk=%d C=%d NH=%d NKV=%d (hs %d) %s shift %d %s%s", B, Ts, Tq, Tk,
             C, NH, NKV, C / NH, causal ? "causal" : "full", shift, bf16 ? "bf16" : "fp32",
             packed ? " packed samples" : "");
    packed_segs ps = packed_make(packed, B, Ts);
    size_t nq = (size_t)B * Ts * dt_qkv_cols(C, NH, NKV), nkv = (size_t)B * Ts * dt_kv_cols(C, NH, NKV), no = (size_t)B * Ts * C, nl = (size_t)B * NH * Ts;
    float *q = hrand(nq, 1.0f), *kv = hrand(nkv, 1.0f), *out = hrand(no, 1.0f), *lse = hrand(nl, 1.0f);
    float *pout = hrand(no, 1.0f), *plse = hrand(nl, 1.0f);
    if (bf16) {
        cpu->round_bf16(q, nq);
        cpu->round_bf16(kv, nkv);
    }
    set_bf16(bf16);
    dbuf dq = dup_f(q, nq, 0), dkv = dup_f(kv, nkv, 0), dout = dup_f(out, no, 0), dlse = dup_f(lse, nl, 0);
    dbuf dpout = dup_f(pout, no, 0), dplse = dup_f(plse, nl, 0);
    /* a first block into (out, lse), a second (shifted one block on) merged into it */
    cpu->attention_block_forward(out, lse, q, kv, ps.hq, ps.hk, B, Ts, Tq, Tk, C, NH, NKV, causal, shift, DT_F32,
                                 DT_F32);
    gpu->attention_block_forward(dout.p, dlse.p, dq.p, dkv.p, ps.dq, ps.dk, B, Ts, Tq, Tk, C, NH, NKV, causal, shift,
                                 DT_F32, DT_F32);
    cpu->attention_block_forward(pout, plse, q, kv, ps.hq, ps.hk, B, Ts, Tq, Tk, C, NH, NKV, causal, shift + Tk,
                                 DT_F32, DT_F32);
    gpu->attention_block_forward(dpout.p, dplse.p, dq.p, dkv.p, ps.dq, ps.dk, B, Ts, Tq, Tk, C, NH, NKV, causal,
                                 shift + Tk, DT_F32, DT_F32);
    snprintf(what, sizeof what, "attention_block_forward out %s", shape);
    expect(what, &dout, out, no, tol);
    snprintf(what, sizeof what, "attention_block_forward lse %s", shape);
    expect_lse(what, &dlse, lse, nl, TOL_GEMM);
    snprintf(what, sizeof what, "attention_block_forward out, second block (shift %d) %s", shift + Tk, shape);
    expect(what, &dpout, pout, no, tol);
    snprintf(what, sizeof what, "attention_block_forward lse, second block %s", shape);
    expect_lse(what, &dplse, plse, nl, TOL_GEMM);
    cpu->attention_block_merge(out, lse, pout, plse, B, Ts, Tq, C, NH);
    gpu->attention_block_merge(dout.p, dlse.p, dpout.p, dplse.p, B, Ts, Tq, C, NH);
    snprintf(what, sizeof what, "attention_block_merge out %s", shape);
    expect(what, &dout, out, no, tol);
    snprintf(what, sizeof what, "attention_block_merge lse %s", shape);
    expect_lse(what, &dlse, lse, nl, TOL_GEMM);

    /* backward alone: both sides from the CPU's merged out and lse */
    gpu->from_host(dout.p, out, no * sizeof(float));
    gpu->from_host(dlse.p, lse, nl * sizeof(float));
    float *gq;
    dbuf dgq;
    block_backward_twin(shape, tol, out, dout.p, lse, dlse.p, q, kv, dq.p, dkv.p, &ps, B, Ts, Tq, Tk, C, NH, NKV,
                        causal, shift, DT_F32, &gq, &dgq);
    set_bf16(0);
    drop(&dq); drop(&dkv); drop(&dout); drop(&dlse); drop(&dpout); drop(&dplse); drop(&dgq);
    free(q); free(kv); free(out); free(lse); free(pout); free(plse); free(gq);
    packed_free(&ps);
}

static void test_attention_block(int B, int Ts, int Tq, int Tk, int C, int NH, int NKV, int causal, int shift,
                                 int bf16) {
    attention_block_case(B, Ts, Tq, Tk, C, NH, NKV, causal, shift, bf16, 0);
}

/* decoding's one query q over a cache kv of kv heads only (GQA when NKV <
 * NH), both cut from one qkv [T, W] (q: the last row's, kv: every row's k
 * and v, packed); also the CPU's own check that it is the causal
 * attention_forward's last row. t = bf16: q, kv and out stored as bf16 on
 * both sides (one rounding of out each: + TOL_ULP16). */
static void test_attention_decode(int T, int C, int NH, int NKV, dt_dtype t) {
    char what[200];
    int W = dt_qkv_cols(C, NH, NKV), C2 = dt_kv_cols(C, NH, NKV);
    size_t nqkv = (size_t)T * W, nkv = (size_t)T * C2, es = dt_dtype_size(t);
    int saved = bf16_values;
    bf16_values = t == DT_BF16; /* the values a bf16 cache holds, fp32 on the reference side */
    float *qkv = hrand(nqkv, 1.0f), *kv = malloc(nkv * sizeof(float)), *out = malloc((size_t)C * sizeof(float));
    bf16_values = saved;
    float *scratch = malloc((size_t)NH * T * sizeof(float));
    float *full = malloc((size_t)T * C * sizeof(float)), *att = malloc((size_t)NH * T * T * sizeof(float));
    cpu->rows_copy(kv, C2, qkv + C, W, T, C2, 0, DT_F32);
    const float *q = qkv + (size_t)(T - 1) * W;
    cpu->attention_decode(out, scratch, q, kv, T, C, NH, NKV, DT_F32);
    cpu->attention_forward(full, att, qkv, 1, T, C, NH, NKV, 1, DT_F32);
    double worst = 0;
    for (int i = 0; i < C; i++) {
        double d = fabs((double)out[i] - full[(size_t)(T - 1) * C + i]);
        if (d > worst) worst = d;
    }
    snprintf(what, sizeof what, "attention_decode T=%d C=%d NH=%d NKV=%d: cpu = attention_forward's last row", T, C,
             NH, NKV);
    printf("%s - %s (max |diff| %.2g)\n", worst <= TOL_GEMM ? "ok" : "not ok", what, worst);
    /* the typed twin: both backends from the same stored q and kv */
    void *hq = malloc((size_t)C * es), *hkv = malloc(nkv * es), *hout = malloc((size_t)C * es);
    if (t == DT_BF16) {
        cpu->to_bf16(hq, q, (size_t)C);
        cpu->to_bf16(hkv, kv, nkv);
    } else {
        memcpy(hq, q, (size_t)C * es);
        memcpy(hkv, kv, nkv * es);
    }
    cpu->attention_decode(hout, scratch, hq, hkv, T, C, NH, NKV, t);
    void *dq = dup_bytes(hq, (size_t)C * es), *dkv = dup_bytes(hkv, nkv * es), *dout = gpu->alloc((size_t)C * es);
    float *dscratch = gpu->alloc((size_t)NH * T * sizeof(float));
    gpu->attention_decode(dout, dscratch, dq, dkv, T, C, NH, NKV, t);
    snprintf(what, sizeof what, "attention_decode T=%d C=%d NH=%d NKV=%d %s", T, C, NH, NKV,
             t == DT_BF16 ? "bf16" : "fp32");
    expect_typed(what, dout, hout, (size_t)C, t, TOL_GEMM + (t == DT_BF16 ? TOL_ULP16 : 0.0));
    gpu->free(dq); gpu->free(dkv); gpu->free(dout); gpu->free(dscratch);
    free(hq); free(hkv); free(hout);
    free(qkv); free(kv); free(out); free(scratch); free(full); free(att);
}

/* ---------------------------------------------------------------- attention, bf16 activations */

/* The attention ops with their activations stored as bf16 (t = DT_BF16, what
 * a mixed-precision model keeps: qkv, out, att): inputs are bf16 arrays on
 * both sides (random values rounded by the CPU's to_bf16), both backends are
 * called with the same types, and bf16 results are widened (from_bf16,
 * exact) and measured as the fp32 tests measure. Tolerances:
 * - tol, the arithmetic's: TOL_GEMM under fp32 arithmetic (products off:
 *   the CUDA-core kernels widen bf16 operands exactly as they load them, so
 *   only the summation order differs from the CPU's); TOL_ATT_BF16 under
 *   bf16 products (the tensor-core kernels' roundings of P, dO and dS, see
 *   the top of the file). The naive attention's bf16 backward rounds dO and
 *   dS to bf16 for its cuBLAS GEMMs in either mode (attention.cu): the same
 *   roundings, TOL_ATT_BF16; its probabilities are computed on CUDA cores in
 *   fp32 in either mode: TOL_GEMM before they are stored.
 * - fp32 results (lse, dq, dkv, dqkv): tol (the inputs are the same values
 *   on both sides).
 * - results rounded to bf16 where they are stored (out, att): each side
 *   rounds its own fp32 value, and the two fp32 values are within tol of
 *   each other; two roundings to nearest of nearly equal values land on the
 *   same bf16 number or, straddling a rounding boundary, on neighbours, one
 *   ulp apart. One bf16 ulp is at most 2^-7 of the value (8 significant
 *   bits: a value in [2^e, 2^(e+1)) has ulp 2^(e-7)), hence of the tensor's
 *   largest element: tol + TOL_ULP16. A wrong mask, index or type moves
 *   outputs by O(1). */
/* attention_block_forward (out of type out_t: bf16, the model's final
 * result, or fp32, a context-parallel partial) and attention_block_backward
 * on bf16 q, kv and out. The rows of out past Tq must keep their bits. */
static void attention_block_bf16_case(int B, int Ts, int Tq, int Tk, int C, int NH, int NKV, int causal, int shift,
                                      int bf16, dt_dtype out_t, int packed) {
    char what[300], shape[220];
    double tol = bf16 ? TOL_ATT_BF16 : TOL_GEMM, tol_out = tol + (out_t == DT_BF16 ? TOL_ULP16 : 0.0);
    snprintf(shape, sizeof shape, "B=%d Ts=%d Tq=%d Tk=%d C=%d NH=%d NKV=%d (hs %d) %s shift %d, bf16 q kv, %s out, %s "
             "products%s", B, Ts, Tq, Tk, C, NH, NKV, C / NH, causal ? "causal" : "full", shift,
             out_t == DT_BF16 ? "bf16" : "fp32", bf16 ? "bf16" : "fp32", packed ? ", packed samples" : "");
    packed_segs ps = packed_make(packed, B, Ts);
    size_t nq = (size_t)B * Ts * dt_qkv_cols(C, NH, NKV), nkv = (size_t)B * Ts * dt_kv_cols(C, NH, NKV), no = (size_t)B * Ts * C, nl = (size_t)B * NH * Ts;
    size_t osz = dt_dtype_size(out_t);
    float *qf = hrand(nq, 1.0f), *kvf = hrand(nkv, 1.0f), *of = hrand(no, 1.0f), *lse = hrand(nl, 1.0f);
    uint16_t *q = host16(qf, nq), *kv = host16(kvf, nkv);
    void *out = malloc(no * osz), *out0 = malloc(no * osz);
    if (out_t == DT_BF16) cpu->to_bf16(out, of, no);
    else memcpy(out, of, no * sizeof(float));
    memcpy(out0, out, no * osz);
    void *dq = dup_bytes(q, nq * 2), *dkv = dup_bytes(kv, nkv * 2), *dout = dup_bytes(out, no * osz);
    dbuf dlse = dup_f(lse, nl, 0);
    set_bf16(bf16);
    cpu->attention_block_forward(out, lse, q, kv, ps.hq, ps.hk, B, Ts, Tq, Tk, C, NH, NKV, causal, shift, DT_BF16,
                                 out_t);
    gpu->attention_block_forward(dout, dlse.p, dq, dkv, ps.dq, ps.dk, B, Ts, Tq, Tk, C, NH, NKV, causal, shift,
                                 DT_BF16, out_t);
    snprintf(what, sizeof what, "attention_block_forward out %s", shape);
    expect_typed(what, dout, out, no, out_t, tol_out);
    snprintf(what, sizeof what, "attention_block_forward lse %s", shape);
    expect_lse(what, &dlse, lse, nl, TOL_GEMM);
    /* rows Tq..Ts of every sample: not the op's, left as they were */
    char *got = malloc(no * osz);
    gpu->to_host(got, dout, no * osz);
    size_t row = (size_t)C * osz, kept_bad = 0;
    for (int b = 0; b < B; b++)
        for (int i = Tq; i < Ts; i++) {
            size_t off = ((size_t)b * Ts + i) * row;
            kept_bad += memcmp(got + off, (char *)out0 + off, row) != 0;
        }
    CHECK(kept_bad == 0, "attention_block_forward %s: rows past Tq keep their bits (%zu rows differ)", shape,
          kept_bad);
    free(got);

    /* backward alone, from the CPU's final out (of type t: rounded when the
     * forward gave fp32) and lse */
    uint16_t *o16 = out_t == DT_BF16 ? (uint16_t *)out : host16(out, no);
    void *do16 = dup_bytes(o16, no * 2);
    gpu->from_host(dlse.p, lse, nl * sizeof(float));
    float *gq;
    dbuf dgq;
    block_backward_twin(shape, tol, o16, do16, lse, dlse.p, q, kv, dq, dkv, &ps, B, Ts, Tq, Tk, C, NH, NKV, causal,
                        shift, DT_BF16, &gq, &dgq);
    packed_free(&ps);
    set_bf16(0);
    gpu->free(dq); gpu->free(dkv); gpu->free(dout); gpu->free(do16);
    drop(&dlse); drop(&dgq);
    if (o16 != out) free(o16);
    free(qf); free(kvf); free(of); free(lse); free(q); free(kv); free(out); free(out0); free(gq);
}

static void test_attention_block_bf16(int B, int Ts, int Tq, int Tk, int C, int NH, int NKV, int causal, int shift,
                                      int bf16, dt_dtype out_t) {
    attention_block_bf16_case(B, Ts, Tq, Tk, C, NH, NKV, causal, shift, bf16, out_t, 0);
}

/* attention_forward / attention_backward (the naive attention) on bf16
 * qkv, out and att. */
static void test_attention_bf16(int B, int T, int C, int NH, int NKV, int causal, int bf16) {
    char what[240], shape[160];
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d NH=%d NKV=%d %s, bf16 activations, %s products", B, T, C, NH, NKV,
             causal ? "causal" : "full", bf16 ? "bf16" : "fp32");
    size_t nqkv = (size_t)B * T * dt_qkv_cols(C, NH, NKV), nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkvf = hrand(nqkv, 1.0f), *outf = hrand(nout, 1.0f), *attf = hrand(natt, 1.0f);
    uint16_t *qkv = host16(qkvf, nqkv), *out = host16(outf, nout), *att = host16(attf, natt);
    void *dqkv = dup_bytes(qkv, nqkv * 2), *dout = dup_bytes(out, nout * 2), *datt = dup_bytes(att, natt * 2);
    set_bf16(bf16);
    cpu->attention_forward(out, att, qkv, B, T, C, NH, NKV, causal, DT_BF16);
    gpu->attention_forward(dout, datt, dqkv, B, T, C, NH, NKV, causal, DT_BF16);
    snprintf(what, sizeof what, "attention_forward out %s", shape);
    expect_typed(what, dout, out, nout, DT_BF16, (bf16 ? TOL_ATT_BF16 : TOL_GEMM) + TOL_ULP16);
    snprintf(what, sizeof what, "attention_forward att %s", shape);
    expect_typed(what, datt, att, natt, DT_BF16, TOL_GEMM + TOL_ULP16);

    /* backward alone, both sides from the CPU's probabilities */
    float *g = hrand(nout, 1.0f), *gq = hrand(nqkv, 1.0f), *gq0 = malloc(nqkv * sizeof(float));
    memcpy(gq0, gq, nqkv * sizeof(float));
    float *scratch = malloc(natt * sizeof(float));
    dbuf dg = dup_f(g, nout, 0), dgq = dup_f(gq, nqkv, 0);
    float *dscratch = gpu->alloc(natt * sizeof(float));
    gpu->from_host(datt, att, natt * 2);
    cpu->attention_backward(gq, scratch, g, qkv, att, B, T, C, NH, NKV, causal, DT_BF16);
    gpu->attention_backward(dgq.p, dscratch, dg.p, dqkv, datt, B, T, C, NH, NKV, causal, DT_BF16);
    snprintf(what, sizeof what, "attention_backward dqkv (accumulates) %s", shape);
    expect_added(what, &dgq, gq0, gq, nqkv, TOL_ATT_BF16);
    set_bf16(0);
    gpu->free(dqkv); gpu->free(dout); gpu->free(datt); gpu->free(dscratch);
    drop(&dg); drop(&dgq);
    free(qkvf); free(outf); free(attf); free(qkv); free(out); free(att);
    free(g); free(gq); free(gq0); free(scratch);
}

/* ---------------------------------------------------------------- elementwise */

static void test_elementwise(size_t n) {
    char what[128];
    float *x = hrand(n, 4.0f), *out = hrand(n, 1.0f);
    dbuf dx = dup_f(x, n, 0), dout = dup_f(out, n, 0);
    cpu->gelu_forward(out, x, n, DT_F32);
    gpu->gelu_forward(dout.p, dx.p, n, DT_F32);
    snprintf(what, sizeof what, "gelu_forward n=%zu", n);
    expect(what, &dout, out, n, TOL_ELEM);
    float *g = hrand(n, 1.0f), *gi = hrand(n, 1.0f);
    dbuf dg = dup_f(g, n, 0), dgi = dup_f(gi, n, 0);
    cpu->gelu_backward(gi, x, g, n, DT_F32);
    gpu->gelu_backward(dgi.p, dx.p, dg.p, n, DT_F32);
    snprintf(what, sizeof what, "gelu_backward n=%zu (accumulates)", n);
    expect(what, &dgi, gi, n, TOL_ELEM);
    /* the exact (erf) GELU, model.activation gelu */
    cpu->gelu_erf_forward(out, x, n, DT_F32);
    gpu->gelu_erf_forward(dout.p, dx.p, n, DT_F32);
    snprintf(what, sizeof what, "gelu_erf_forward n=%zu", n);
    expect(what, &dout, out, n, TOL_ELEM);
    cpu->gelu_erf_backward(gi, x, g, n, DT_F32);
    gpu->gelu_erf_backward(dgi.p, dx.p, dg.p, n, DT_F32);
    snprintf(what, sizeof what, "gelu_erf_backward n=%zu (accumulates)", n);
    expect(what, &dgi, gi, n, TOL_ELEM);

    /* residual, with out aliasing a as the model calls it */
    cpu->residual_forward(out, out, x, n, DT_F32);
    gpu->residual_forward(dout.p, dout.p, dx.p, n, DT_F32);
    snprintf(what, sizeof what, "residual_forward n=%zu (out aliases a)", n);
    expect(what, &dout, out, n, TOL_EXACT);
    cpu->residual_backward(gi, x, g, n);
    gpu->residual_backward(dgi.p, dx.p, dg.p, n);
    snprintf(what, sizeof what, "residual_backward n=%zu (accumulates both)", n);
    float *h1 = back(&dgi, n), *h2 = back(&dx, n);
    double e = fmax(rel_err(h1, gi, n), rel_err(h2, x, n));
    CHECK(e <= TOL_EXACT, "%s: max rel err %.2e <= %.0e", what, e, TOL_EXACT);
    free(h1); free(h2);

    cpu->scale(x, 0.37f, n);
    gpu->scale(dx.p, 0.37f, n);
    snprintf(what, sizeof what, "scale n=%zu", n);
    expect(what, &dx, x, n, TOL_EXACT);
    double sc = cpu->sumsq(x, n), sg = gpu->sumsq(dx.p, n);
    e = fabs(sc - sg) / fmax(fabs(sc), 1e-300);
    CHECK(e <= TOL_SUMSQ, "sumsq n=%zu: %.17g vs cpu %.17g, rel err %.2e <= %.0e", n, sg, sc, e,
          TOL_SUMSQ);
    drop(&dx); drop(&dout); drop(&dg); drop(&dgi);
    free(x); free(out); free(g); free(gi);
}

/* The elementwise ops and the layernorm on bf16 activations (ops.h: inp
 * and out of type t, gradients fp32). Inputs are bf16 values on both sides;
 * fp32 results (the backward's) within the fp32 ops' TOL_ELEM; a result
 * rounded where it is stored (GELU's, layernorm's out) is each side's fp32
 * value, within TOL_ELEM of the other, rounded once: TOL_ELEM + TOL_ULP16
 * (one ulp where the two straddle a rounding boundary). The residual add is
 * one IEEE addition then one rounding on both sides, and rows_copy copies
 * the bits: exact. */
static void test_elementwise_act16(size_t n) {
    char what[128];
    float *xf = hrand(n, 4.0f), *af = hrand(n, 1.0f);
    uint16_t *x = host16(xf, n), *out = calloc(n ? n : 1, sizeof(uint16_t));
    void *dx = dup_bytes(x, n * 2), *dout = dup_bytes(out, n * 2);
    struct {
        const char *name;
        void (*cf)(void *, const void *, size_t, dt_dtype), (*gf)(void *, const void *, size_t, dt_dtype);
        void (*cb)(float *, const void *, const float *, size_t, dt_dtype);
        void (*gb)(float *, const void *, const float *, size_t, dt_dtype);
    } kinds[2] = {{"gelu", cpu->gelu_forward, gpu->gelu_forward, cpu->gelu_backward, gpu->gelu_backward},
                  {"gelu_erf", cpu->gelu_erf_forward, gpu->gelu_erf_forward, cpu->gelu_erf_backward,
                   gpu->gelu_erf_backward}};
    float *g = hrand(n, 1.0f), *gi = hrand(n, 1.0f);
    dbuf dg = dup_f(g, n, 0), dgi = dup_f(gi, n, 0);
    for (int k = 0; k < 2; k++) {
        kinds[k].cf(out, x, n, DT_BF16);
        kinds[k].gf(dout, dx, n, DT_BF16);
        snprintf(what, sizeof what, "%s_forward bf16 n=%zu", kinds[k].name, n);
        expect_typed(what, dout, out, n, DT_BF16, TOL_ELEM + TOL_ULP16);
        kinds[k].cb(gi, x, g, n, DT_BF16);
        kinds[k].gb(dgi.p, dx, dg.p, n, DT_BF16);
        snprintf(what, sizeof what, "%s_backward bf16 input n=%zu (accumulates)", kinds[k].name, n);
        expect(what, &dgi, gi, n, TOL_ELEM);
    }
    dbuf da = dup_f(af, n, 0);
    cpu->residual_forward(out, af, x, n, DT_BF16);
    gpu->residual_forward(dout, da.p, dx, n, DT_BF16);
    snprintf(what, sizeof what, "residual_forward bf16 out = bf16(a + b) n=%zu", n);
    expect_typed(what, dout, out, n, DT_BF16, TOL_EXACT);
    /* rows_copy: the odd columns of x as rows of 3 out of rows of 4 */
    int N = (int)(n / 4), W = 3;
    if (N > 0) {
        cpu->rows_copy(out, W, x + 1, 4, N, W, 0, DT_BF16);
        gpu->rows_copy(dout, W, (uint16_t *)dx + 1, 4, N, W, 0, DT_BF16);
        snprintf(what, sizeof what, "rows_copy bf16 N=%d W=%d", N, W);
        expect_typed(what, dout, out, (size_t)N * W, DT_BF16, TOL_EXACT);
    }
    gpu->free(dx); gpu->free(dout); drop(&dg); drop(&dgi); drop(&da);
    free(xf); free(af); free(x); free(out); free(g); free(gi);
}

/* train.lora's dropout (ops.h dropout_forward / _backward): the same
 * Philox draw per element on both sides, so the same mask; the kept values
 * one fp32 product (and in bf16 one rounding) each: exact. */
static void test_dropout(int N, int W, long long cols, long long col0, float p) {
    char what[128];
    size_t n = (size_t)N * W;
    long long *rows = malloc((size_t)(N ? N : 1) * sizeof(long long));
    for (int i = 0; i < N; i++) rows[i] = 1000003LL * i + 17;
    long long *drows = gpu->alloc((size_t)(N ? N : 1) * sizeof(long long));
    if (N) gpu->from_host(drows, rows, (size_t)N * sizeof(long long));
    uint64_t key = 0x9E3779B97F4A7C15ull;
    float *x = hrand(n, 2.0f), *out = calloc(n ? n : 1, sizeof(float)), *g = hrand(n, 1.0f), *gi = hrand(n, 1.0f);
    dbuf dx = dup_f(x, n, 0), dout = zeros_f(n), dg = dup_f(g, n, 0), dgi = dup_f(gi, n, 0);
    cpu->dropout_forward(out, x, rows, N, W, cols, col0, key, p, DT_F32);
    gpu->dropout_forward(dout.p, dx.p, drows, N, W, cols, col0, key, p, DT_F32);
    snprintf(what, sizeof what, "dropout_forward fp32 N=%d W=%d p=%g", N, W, p);
    expect(what, &dout, out, n, TOL_EXACT);
    cpu->dropout_backward(gi, g, rows, N, W, cols, col0, key, p);
    gpu->dropout_backward(dgi.p, dg.p, drows, N, W, cols, col0, key, p);
    snprintf(what, sizeof what, "dropout_backward (accumulates) N=%d W=%d p=%g", N, W, p);
    expect(what, &dgi, gi, n, TOL_EXACT);
    uint16_t *x16 = host16(x, n), *o16 = calloc(n ? n : 1, sizeof(uint16_t));
    void *dx16 = dup_bytes(x16, n * 2), *do16 = dup_bytes(o16, n * 2);
    cpu->dropout_forward(o16, x16, rows, N, W, cols, col0, key, p, DT_BF16);
    gpu->dropout_forward(do16, dx16, drows, N, W, cols, col0, key, p, DT_BF16);
    snprintf(what, sizeof what, "dropout_forward bf16 N=%d W=%d p=%g", N, W, p);
    expect_typed(what, do16, o16, n, DT_BF16, TOL_EXACT);
    gpu->free(dx16); gpu->free(do16); gpu->free(drows);
    drop(&dx); drop(&dout); drop(&dg); drop(&dgi);
    free(rows); free(x); free(out); free(g); free(gi); free(x16); free(o16);
}

static void test_layernorm_act16(int N, int C) {
    char what[128];
    size_t n = (size_t)N * C;
    float *xf = hrand(n, 2.0f), *w = hrand((size_t)C, 1.0f), *b = hrand((size_t)C, 1.0f);
    for (int i = 0; i < N; i++) xf[(size_t)i * C] += 3.0f;
    uint16_t *x = host16(xf, n), *out = calloc(n ? n : 1, sizeof(uint16_t));
    float *mean = hrand((size_t)N, 1.0f), *rstd = hrand((size_t)N, 1.0f);
    void *dx = dup_bytes(x, n * 2), *dout = dup_bytes(out, n * 2);
    dbuf dw = dup_f(w, (size_t)C, 0), db = dup_f(b, (size_t)C, 0);
    dbuf dmean = dup_f(mean, (size_t)N, 0), drstd = dup_f(rstd, (size_t)N, 0);
    cpu->layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f, DT_BF16);
    gpu->layernorm_forward(dout, dmean.p, drstd.p, dx, dw.p, db.p, N, C, 1e-5f, DT_BF16);
    snprintf(what, sizeof what, "layernorm_forward bf16 N=%d C=%d", N, C);
    expect_typed(what, dout, out, n, DT_BF16, TOL_ELEM + TOL_ULP16);
    snprintf(what, sizeof what, "layernorm_forward bf16 input: mean N=%d C=%d", N, C);
    expect(what, &dmean, mean, (size_t)N, TOL_ELEM);
    snprintf(what, sizeof what, "layernorm_forward bf16 input: rstd N=%d C=%d", N, C);
    expect(what, &drstd, rstd, (size_t)N, TOL_ELEM);
    float *g = hrand(n, 1.0f), *dxi = hrand(n, 1.0f), *gw = hrand((size_t)C, 1.0f), *gb = hrand((size_t)C, 1.0f);
    dbuf dg = dup_f(g, n, 0), ddx = dup_f(dxi, n, 0), dgw = dup_f(gw, (size_t)C, 0), dgb = dup_f(gb, (size_t)C, 0);
    gpu->from_host(dmean.p, mean, (size_t)N * sizeof(float));
    gpu->from_host(drstd.p, rstd, (size_t)N * sizeof(float));
    cpu->layernorm_backward(dxi, gw, gb, g, x, w, mean, rstd, N, C, DT_BF16);
    gpu->layernorm_backward(ddx.p, dgw.p, dgb.p, dg.p, dx, dw.p, dmean.p, drstd.p, N, C, DT_BF16);
    snprintf(what, sizeof what, "layernorm_backward bf16 input dinp N=%d C=%d", N, C);
    expect(what, &ddx, dxi, n, TOL_ELEM);
    snprintf(what, sizeof what, "layernorm_backward bf16 input dw, db N=%d C=%d", N, C);
    expect(what, &dgw, gw, (size_t)C, TOL_ELEM);
    expect(what, &dgb, gb, (size_t)C, TOL_ELEM);
    gpu->free(dx); gpu->free(dout);
    drop(&dw); drop(&db); drop(&dmean); drop(&drstd); drop(&dg); drop(&ddx); drop(&dgw); drop(&dgb);
    free(xf); free(w); free(b); free(x); free(out); free(mean); free(rstd); free(g); free(dxi); free(gw); free(gb);
}

/* residual_layernorm_forward: the residual add and the layernorm of its sum
 * in one pass on the device, the two ops on the CPU. res is the add, exact
 * in fp32 and rounded once in bf16 on both sides (TOL_EXACT); out, mean,
 * rstd the layernorm's of the stored sum (TOL_ELEM, and one bf16 ulp more
 * for a bf16 out). */
static void test_residual_layernorm(int N, int C, dt_dtype t) {
    char what[160];
    size_t n = (size_t)N * C, e = dt_dtype_size(t);
    const char *ty = t == DT_BF16 ? "bf16" : "fp32";
    float *af = hrand(n, 1.0f), *bf = hrand(n, 2.0f), *w = hrand((size_t)C, 1.0f), *bias = hrand((size_t)C, 1.0f);
    for (int i = 0; i < N; i++) bf[(size_t)i * C] += 3.0f; /* a mean away from 0 */
    void *b = t == DT_BF16 ? (void *)host16(bf, n) : (void *)bf;
    void *res = calloc(n ? n : 1, e), *out = calloc(n ? n : 1, e);
    float *mean = hrand((size_t)N, 1.0f), *rstd = hrand((size_t)N, 1.0f);
    dbuf da = dup_f(af, n, 0), dw = dup_f(w, (size_t)C, 0), dbias = dup_f(bias, (size_t)C, 0);
    dbuf dmean = dup_f(mean, (size_t)N, 0), drstd = dup_f(rstd, (size_t)N, 0);
    void *db = dup_bytes(b, n * e), *dres = dup_bytes(res, n * e), *dout = dup_bytes(out, n * e);
    cpu->residual_layernorm_forward(res, out, mean, rstd, af, b, w, bias, N, C, 1e-5f, t);
    gpu->residual_layernorm_forward(dres, dout, dmean.p, drstd.p, da.p, db, dw.p, dbias.p, N, C, 1e-5f, t);
    snprintf(what, sizeof what, "residual_layernorm_forward %s res N=%d C=%d", ty, N, C);
    expect_typed(what, dres, res, n, t, TOL_EXACT);
    snprintf(what, sizeof what, "residual_layernorm_forward %s out N=%d C=%d", ty, N, C);
    expect_typed(what, dout, out, n, t, TOL_ELEM + (t == DT_BF16 ? TOL_ULP16 : 0.0));
    snprintf(what, sizeof what, "residual_layernorm_forward %s mean, rstd N=%d C=%d", ty, N, C);
    expect(what, &dmean, mean, (size_t)N, TOL_ELEM);
    expect(what, &drstd, rstd, (size_t)N, TOL_ELEM);
    drop(&da); drop(&dw); drop(&dbias); drop(&dmean); drop(&drstd);
    gpu->free(db); gpu->free(dres); gpu->free(dout);
    if (t == DT_BF16) free(b);
    free(af); free(bf); free(w); free(bias); free(res); free(out); free(mean); free(rstd);
}

static void test_adamw(size_t n) {
    char what[128];
    float *p = hrand(n, 1.0f), *g = hrand(n, 1.0f), *m = hrand(n, 0.1f), *v = hrand(n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]); /* a second moment is >= 0 */
    dbuf dp = dup_f(p, n, 0), dg = dup_f(g, n, 0), dm = dup_f(m, n, 0), dv = dup_f(v, n, 0);
    for (int t = 1; t <= 3; t++) {
        cpu->adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        gpu->adamw(dp.p, dg.p, dm.p, dv.p, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    snprintf(what, sizeof what, "adamw p after 3 steps n=%zu", n);
    expect(what, &dp, p, n, TOL_ELEM);
    snprintf(what, sizeof what, "adamw m after 3 steps n=%zu", n);
    expect(what, &dm, m, n, TOL_ELEM);
    snprintf(what, sizeof what, "adamw v after 3 steps n=%zu", n);
    expect(what, &dv, v, n, TOL_ELEM);
    drop(&dp); drop(&dg); drop(&dm); drop(&dv);
    free(p); free(g); free(m); free(v);
}

/* Several tensors of odd sizes (one empty) in one adamw_multi: within
 * TOL_ELEM of the CPU's, and bitwise the device's adamw per tensor (the same
 * arithmetic); a second list (other decay) makes it send the list again. */
static void test_adamw_multi(void) {
    enum { K = 5 };
    const size_t sizes[K] = {1000003, 7, 0, 4096, 33};
    dt_adamw_tensor hl[K], dl[K];
    float *h[K][4], *ref[K];
    dbuf d[K][4], one[K][4];
    for (int k = 0; k < K; k++) {
        size_t n = sizes[k];
        for (int j = 0; j < 4; j++) {
            h[k][j] = hrand(n, j >= 2 ? 0.1f : 1.0f);
            if (j == 3) for (size_t i = 0; i < n; i++) h[k][3][i] = fabsf(h[k][3][i]);
            d[k][j] = dup_f(h[k][j], n, 0);
            one[k][j] = dup_f(h[k][j], n, 0);
        }
    }
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < K; k++) {
            float wd = round == 0 ? 0.1f * (float)(k % 2) : 0.05f;
            hl[k] = (dt_adamw_tensor){h[k][0], h[k][1], h[k][2], h[k][3], sizes[k], wd};
            dl[k] = (dt_adamw_tensor){d[k][0].p, d[k][1].p, d[k][2].p, d[k][3].p, sizes[k], wd};
        }
        for (int t = 1; t <= 2; t++) {
            cpu->adamw_multi(hl, K, 1e-3f, 0.9f, 0.95f, 1e-8f, t);
            gpu->adamw_multi(dl, K, 1e-3f, 0.9f, 0.95f, 1e-8f, t);
            for (int k = 0; k < K; k++)
                gpu->adamw(one[k][0].p, one[k][1].p, one[k][2].p, one[k][3].p, sizes[k], 1e-3f, 0.9f, 0.95f, 1e-8f,
                           hl[k].weight_decay, t);
        }
    }
    int same = 1;
    for (int k = 0; k < K; k++) {
        char what[96];
        snprintf(what, sizeof what, "adamw_multi tensor %d (n=%zu) p after 4 steps", k, sizes[k]);
        if (sizes[k]) expect(what, &d[k][0], h[k][0], sizes[k], TOL_ELEM);
        ref[k] = back(&one[k][0], sizes[k]);
        float *got = back(&d[k][0], sizes[k]);
        same &= memcmp(ref[k], got, sizes[k] * sizeof(float)) == 0;
        free(got);
        free(ref[k]);
        for (int j = 0; j < 4; j++) drop(&d[k][j]), drop(&one[k][j]), free(h[k][j]);
    }
    CHECK(same, "adamw_multi: bitwise the device's adamw on each tensor");
}

/* bf16 mixed precision's step, adamw_mixed_multi, on several tensors of odd
 * sizes (one empty), bf16 and fp32 gradients, scaled and not, 3 steps (the
 * third with other weight decays: the list is sent again):
 * - bitwise the device's own op-by-op sequence (from_bf16 or copy, scale,
 *   adamw, to_bf16: the same per-element arithmetic, ops.h);
 * - the master, m and v within TOL_ELEM of the CPU twin's (AdamW's tolerance:
 *   sqrtf and nvcc's FMA contraction of b*m + (1-b)*g against the CPU's
 *   separate roundings);
 * - the bf16 parameters bitwise the device's master rounded as the CPU
 *   rounds (to_bf16 is bitwise across backends), hence at most one bf16 ulp
 *   from the CPU's: a master a few fp32 ulps from the CPU's rounds to the
 *   neighbouring bf16 value only when the two straddle a rounding boundary
 *   (a half-way point between bf16 values); the count of such is printed. */
static int bf16_ordered(uint16_t h) { return h & 0x8000u ? -(int)(h & 0x7fffu) : (int)h; }

static void test_adamw_mixed_multi(int grad_bf16, float grad_scale) {
    enum { K = 5 };
    const size_t sizes[K] = {1000003, 7, 0, 4096, 33};
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    dt_adamw_mixed_tensor hl[K], dl[K];
    float *h[K][4];        /* host: master, g (fp32), m, v */
    uint16_t *hg16[K], *hp[K];
    dbuf d[K][4], old[K][4]; /* device: the fused op's and the op-by-op sequence's */
    uint16_t *dg16[K], *dp[K], *oldp[K];
    size_t widest = 0;
    for (int k = 0; k < K; k++) {
        size_t n = sizes[k];
        if (n > widest) widest = n;
        for (int j = 0; j < 4; j++) {
            h[k][j] = hrand(n, j >= 2 ? 0.1f : 1.0f);
            if (j == 3) for (size_t i = 0; i < n; i++) h[k][3][i] = fabsf(h[k][3][i]);
            d[k][j] = dup_f(h[k][j], n, 0);
            old[k][j] = dup_f(h[k][j], n, 0);
        }
        hg16[k] = malloc((n ? n : 1) * 2), hp[k] = malloc((n ? n : 1) * 2);
        cpu->to_bf16(hg16[k], h[k][1], n);
        dg16[k] = gpu->alloc((n ? n : 1) * 2), dp[k] = gpu->alloc((n ? n : 1) * 2), oldp[k] = gpu->alloc((n ? n : 1) * 2);
        if (n) gpu->from_host(dg16[k], hg16[k], n * 2);
    }
    float *scratch = gpu->alloc(widest * sizeof(float));
    for (int t = 1; t <= 3; t++) {
        for (int k = 0; k < K; k++) {
            float wd = t < 3 ? 0.1f * (float)(k % 2) : 0.05f;
            hl[k] = (dt_adamw_mixed_tensor){h[k][0], grad_bf16 ? (const void *)hg16[k] : (const void *)h[k][1],
                                            h[k][2], h[k][3], hp[k], sizes[k], wd};
            dl[k] = (dt_adamw_mixed_tensor){d[k][0].p, grad_bf16 ? (const void *)dg16[k] : (const void *)d[k][1].p,
                                            d[k][2].p, d[k][3].p, dp[k], sizes[k], wd};
            if (grad_bf16) gpu->from_bf16(scratch, dg16[k], sizes[k]);
            else gpu->copy(scratch, old[k][1].p, sizes[k] * sizeof(float));
            if (grad_scale != 1.0f) gpu->scale(scratch, grad_scale, sizes[k]);
            gpu->adamw(old[k][0].p, scratch, old[k][2].p, old[k][3].p, sizes[k], lr, b1, b2, eps, wd, t);
            gpu->to_bf16(oldp[k], old[k][0].p, sizes[k]);
        }
        cpu->adamw_mixed_multi(hl, K, grad_bf16, grad_scale, lr, b1, b2, eps, t);
        gpu->adamw_mixed_multi(dl, K, grad_bf16, grad_scale, lr, b1, b2, eps, t);
    }
    int same = 1, rounded = 1;
    size_t ulp1 = 0, far = 0, total = 0;
    const char *name[4] = {"master", "g", "m", "v"};
    for (int k = 0; k < K; k++) {
        size_t n = sizes[k];
        total += n;
        for (int j = 0; j < 4; j++) {
            char what[128];
            snprintf(what, sizeof what, "adamw_mixed_multi %s grads x %g, tensor %d (n=%zu) %s after 3 steps",
                     grad_bf16 ? "bf16" : "fp32", grad_scale, k, n, name[j]);
            if (j != 1 && n) expect(what, &d[k][j], h[k][j], n, TOL_ELEM);
            float *a = back(&d[k][j], n), *b = back(&old[k][j], n);
            same &= memcmp(a, b, n * sizeof(float)) == 0;
            if (j == 0) { /* the device's parameters: its master rounded, bitwise */
                uint16_t *gp = malloc((n ? n : 1) * 2), *want = malloc((n ? n : 1) * 2);
                uint16_t *op = malloc((n ? n : 1) * 2);
                if (n) gpu->to_host(gp, dp[k], n * 2), gpu->to_host(op, oldp[k], n * 2);
                cpu->to_bf16(want, a, n);
                rounded &= memcmp(gp, want, n * 2) == 0;
                same &= memcmp(gp, op, n * 2) == 0;
                for (size_t i = 0; i < n; i++) {
                    int dlt = abs(bf16_ordered(gp[i]) - bf16_ordered(hp[k][i]));
                    ulp1 += dlt == 1;
                    far += dlt > 1;
                }
                free(gp), free(want), free(op);
            }
            free(a), free(b);
        }
    }
    CHECK(same, "adamw_mixed_multi %s grads x %g: bitwise the device's from_bf16/copy, scale, adamw, to_bf16",
          grad_bf16 ? "bf16" : "fp32", grad_scale);
    CHECK(rounded, "adamw_mixed_multi %s grads x %g: bf16 params = the device's master rounded to nearest even, "
          "bitwise", grad_bf16 ? "bf16" : "fp32", grad_scale);
    CHECK(far == 0, "adamw_mixed_multi %s grads x %g: bf16 params within one bf16 ulp of the CPU twin's "
          "(%zu of %zu one ulp apart where the masters straddle a rounding boundary, %zu further)",
          grad_bf16 ? "bf16" : "fp32", grad_scale, ulp1, total, far);
    gpu->free(scratch);
    for (int k = 0; k < K; k++) {
        for (int j = 0; j < 4; j++) drop(&d[k][j]), drop(&old[k][j]), free(h[k][j]);
        free(hg16[k]), free(hp[k]);
        gpu->free(dg16[k]), gpu->free(dp[k]), gpu->free(oldp[k]);
    }
}

/* ------------------------------------------- device scalars, graphs */

/* The step on device scalars (ops.h, train.cuda_graphs): each op is host
 * code done on the device, so against that host code (and the device's own
 * host-scalar ops) it must agree bit for bit. */
static void test_device_scalars(void) {
    const int N = 4099;
    float *loss = hrand((size_t)N, 5.0f);
    for (int i = 0; i < N; i++) loss[i] = fabsf(loss[i]);
    dbuf dl = dup_f(loss, (size_t)N, 0);
    double *dacc = gpu->alloc(2 * sizeof(double)), acc[2] = {0.25, 0}, want = 0;
    for (int i = 0; i < N; i++) want += loss[i]; /* the model's host loop */
    want += 0.25;
    gpu->from_host(dacc, acc, sizeof acc);
    gpu->loss_sum_add(dacc, dl.p, N);
    gpu->to_host(acc, dacc, sizeof acc);
    CHECK(memcmp(&acc[0], &want, sizeof want) == 0, "loss_sum_add N=%d: the host loop's sum bit for bit (%.17g vs %.17g)",
          N, acc[0], want);

    int *tg = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tg[i] = i % 5 == 0 ? -1 : i % 97;
    int *dtg = dup_i(tg, (size_t)N);
    float *seed = malloc((size_t)N * sizeof(float)), *hseed = malloc((size_t)N * sizeof(float));
    dbuf ds = dup_f(loss, (size_t)N, 0);
    cpu->loss_seed(seed, tg, 1.0f / 3.0f, N);
    gpu->loss_seed(ds.p, dtg, 1.0f / 3.0f, N);
    gpu->to_host(hseed, ds.p, (size_t)N * sizeof(float));
    CHECK(memcmp(seed, hseed, (size_t)N * sizeof(float)) == 0, "loss_seed N=%d (every fifth target ignored): bit for bit",
          N);

    /* sumsq_add: acc + sumsq's own total, one add */
    size_t n = 1000003;
    float *x = hrand(n, 2.0f);
    dbuf dx = dup_f(x, n, 0);
    double total = gpu->sumsq(dx.p, n), got;
    acc[0] = 1.5;
    gpu->from_host(dacc, acc, sizeof(double));
    gpu->sumsq_add(dacc, dx.p, n);
    gpu->to_host(&got, dacc, sizeof got);
    want = 1.5 + total;
    CHECK(memcmp(&got, &want, sizeof got) == 0, "sumsq_add n=%zu: 1.5 + sumsq's total bit for bit", n);
    double sc = 1.5 + cpu->sumsq(x, n);
    CHECK(fabs(got - sc) / sc <= TOL_SUMSQ, "sumsq_add n=%zu: within %.0e of the cpu's", n, TOL_SUMSQ);
    acc[0] = 2.0, acc[1] = 0.125;
    gpu->from_host(dacc, acc, sizeof acc);
    gpu->scalar_add(dacc, dacc + 1);
    gpu->to_host(&got, dacc, sizeof got);
    CHECK(got == 2.125, "scalar_add: 2 + 0.125 = %.17g", got);

    /* clip_scale: off, below, above, and at the edge, against the host's formula */
    const double sqs[] = {0.0, 0.81, 1.0, 1.0000001, 2.25, 1e6, 3.3e-9};
    const double clips[] = {1.0, 0.0, 0.3};
    float *ds1 = gpu->alloc(sizeof(float));
    int clip_same = 1;
    for (size_t c = 0; c < sizeof clips / sizeof clips[0]; c++)
        for (size_t k = 0; k < sizeof sqs / sizeof sqs[0]; k++) {
            float hs, gs;
            cpu->clip_scale(&hs, &sqs[k], clips[c]);
            gpu->from_host(dacc, &sqs[k], sizeof(double));
            gpu->clip_scale(ds1, dacc, clips[c]);
            gpu->to_host(&gs, ds1, sizeof gs);
            clip_same &= memcmp(&hs, &gs, sizeof hs) == 0;
        }
    CHECK(clip_same, "clip_scale: the cpu's factor bit for bit (21 norms and limits)");

    /* scale_dev: nothing at 1, scale's bits otherwise */
    float one = 1.0f, s = 0.37f;
    dbuf dy = dup_f(x, n, 0), dz = dup_f(x, n, 0);
    gpu->from_host(ds1, &one, sizeof one);
    gpu->scale_dev(dy.p, ds1, n);
    float *hy = back(&dy, n);
    CHECK(memcmp(hy, x, n * sizeof(float)) == 0, "scale_dev by 1: untouched");
    free(hy);
    gpu->from_host(ds1, &s, sizeof s);
    gpu->scale_dev(dy.p, ds1, n);
    gpu->scale(dz.p, s, n);
    float *hz = back(&dz, n);
    hy = back(&dy, n);
    CHECK(memcmp(hy, hz, n * sizeof(float)) == 0, "scale_dev by 0.37: scale's bits");
    free(hy), free(hz);

    /* adamw_multi_dev on one tensor: adamw's bits with lr and t from device memory */
    size_t na = 100003;
    float *p = hrand(na, 1.0f), *g = hrand(na, 1.0f), *m = hrand(na, 0.1f), *v = hrand(na, 0.1f);
    for (size_t i = 0; i < na; i++) v[i] = fabsf(v[i]);
    dbuf a[4] = {dup_f(p, na, 0), dup_f(g, na, 0), dup_f(m, na, 0), dup_f(v, na, 0)};
    dbuf b[4] = {dup_f(p, na, 0), dup_f(g, na, 0), dup_f(m, na, 0), dup_f(v, na, 0)};
    dt_adamw_hyper *dh = gpu->alloc(sizeof *dh);
    for (int t = 1; t <= 3; t++) {
        dt_adamw_hyper h = dt_adamw_hyper_of(1e-3f * (float)t, 0.9f, 0.95f, t);
        dt_adamw_tensor one_b = {b[0].p, b[1].p, b[2].p, b[3].p, na, 0.1f}, one_h = {p, g, m, v, na, 0.1f};
        gpu->from_host(dh, &h, sizeof h);
        gpu->adamw(a[0].p, a[1].p, a[2].p, a[3].p, na, 1e-3f * (float)t, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        gpu->adamw_multi_dev(&one_b, 1, dh, 0.9f, 0.95f, 1e-8f);
        cpu->adamw_multi_dev(&one_h, 1, &h, 0.9f, 0.95f, 1e-8f);
    }
    float *pa = back(&a[0], na), *pb = back(&b[0], na);
    CHECK(memcmp(pa, pb, na * sizeof(float)) == 0, "adamw_multi_dev, one tensor n=%zu, 3 steps: adamw's bits", na);
    expect("adamw_multi_dev p after 3 steps: the cpu's", &b[0], p, na, TOL_ELEM);
    free(pa), free(pb);
    /* adamw_mixed_multi_dev: adamw_mixed_multi's bits (fp32 gradients scaled by 0.37 from device memory) */
    {
        float gs = 0.37f;
        float *dgs = gpu->alloc(sizeof gs);
        gpu->from_host(dgs, &gs, sizeof gs);
        dbuf ma[3] = {dup_f(p, na, 0), dup_f(m, na, 0), dup_f(v, na, 0)};
        dbuf mb[3] = {dup_f(p, na, 0), dup_f(m, na, 0), dup_f(v, na, 0)};
        uint16_t *qa = gpu->alloc(na * 2), *qb = gpu->alloc(na * 2);
        dt_adamw_mixed_tensor la1 = {ma[0].p, a[1].p, ma[1].p, ma[2].p, qa, na, 0.1f};
        dt_adamw_mixed_tensor lb1 = {mb[0].p, a[1].p, mb[1].p, mb[2].p, qb, na, 0.1f};
        for (int t = 1; t <= 2; t++) {
            dt_adamw_hyper h = dt_adamw_hyper_of(1e-3f, 0.9f, 0.95f, t);
            gpu->from_host(dh, &h, sizeof h);
            gpu->adamw_mixed_multi(&la1, 1, 0, gs, 1e-3f, 0.9f, 0.95f, 1e-8f, t);
            gpu->adamw_mixed_multi_dev(&lb1, 1, 0, dgs, dh, 0.9f, 0.95f, 1e-8f);
        }
        float *xa = back(&ma[0], na), *xb = back(&mb[0], na);
        uint16_t *ya = malloc(na * 2), *yb = malloc(na * 2);
        gpu->to_host(ya, qa, na * 2), gpu->to_host(yb, qb, na * 2);
        CHECK(memcmp(xa, xb, na * sizeof(float)) == 0 && memcmp(ya, yb, na * 2) == 0,
              "adamw_mixed_multi_dev, 2 steps: adamw_mixed_multi's master and bf16 parameters bit for bit");
        free(xa), free(xb), free(ya), free(yb);
        for (int j = 0; j < 3; j++) drop(&ma[j]), drop(&mb[j]);
        gpu->free(qa), gpu->free(qb), gpu->free(dgs);
    }
    /* adamw_multi_dev: adamw_multi's bits (a second tensor of 7 of its own, no decay) */
    dbuf a7[4], b7[4];
    for (int j = 0; j < 4; j++) a7[j] = dup_f(j == 3 ? v : p, 7, 0), b7[j] = dup_f(j == 3 ? v : p, 7, 0);
    dt_adamw_tensor la[2] = {{a[0].p, a[1].p, a[2].p, a[3].p, na, 0.1f}, {a7[0].p, a7[1].p, a7[2].p, a7[3].p, 7, 0.0f}};
    dt_adamw_tensor lb[2] = {{b[0].p, b[1].p, b[2].p, b[3].p, na, 0.1f}, {b7[0].p, b7[1].p, b7[2].p, b7[3].p, 7, 0.0f}};
    for (int t = 4; t <= 5; t++) {
        dt_adamw_hyper h = dt_adamw_hyper_of(2e-3f, 0.9f, 0.95f, t);
        gpu->from_host(dh, &h, sizeof h);
        gpu->adamw_multi(la, 2, 2e-3f, 0.9f, 0.95f, 1e-8f, t);
        gpu->adamw_multi_dev(lb, 2, dh, 0.9f, 0.95f, 1e-8f);
    }
    int same = 1;
    for (int j = 0; j < 4; j++) {
        pa = back(&a[j], na), pb = back(&b[j], na);
        same &= memcmp(pa, pb, na * sizeof(float)) == 0;
        free(pa), free(pb);
        pa = back(&a7[j], 7), pb = back(&b7[j], 7);
        same &= memcmp(pa, pb, 7 * sizeof(float)) == 0;
        free(pa), free(pb);
    }
    CHECK(same, "adamw_multi_dev, 2 tensors, 2 steps: adamw_multi's bits");

    for (int j = 0; j < 4; j++) drop(&a[j]), drop(&b[j]), drop(&a7[j]), drop(&b7[j]);
    gpu->free(dh), gpu->free(ds1), gpu->free(dacc), gpu->free(dtg);
    drop(&dl), drop(&ds), drop(&dx), drop(&dy), drop(&dz);
    free(loss), free(tg), free(seed), free(hseed), free(x), free(p), free(g), free(m), free(v);
}

/* Ops recorded as a graph (graph_begin .. graph_end) and launched: a launch
 * computes what issuing the ops computes, reading its inputs and device
 * scalars when it runs (new inputs and a new lr between launches); after the
 * backend's scratch moved, graph_launch answers -1. */
static void test_graph(void) {
    const int N = 64, C = 96;
    size_t nc = (size_t)N * C;
    float *inp = hrand(nc, 1.0f), *w = hrand((size_t)C, 1.0f), *dout = hrand(nc, 1.0f);
    float *mean = malloc((size_t)N * sizeof(float)), *rstd = malloc((size_t)N * sizeof(float));
    float *out = malloc(nc * sizeof(float));
    cpu->layernorm_forward(out, mean, rstd, inp, w, w, N, C, 1e-5f, DT_F32);
    dbuf di = dup_f(inp, nc, 0), dw = dup_f(w, (size_t)C, 0), dd = dup_f(dout, nc, 0), dm = dup_f(mean, (size_t)N, 0),
         dr = dup_f(rstd, (size_t)N, 0);
    dbuf e[3] = {zeros_f(nc), zeros_f((size_t)C), zeros_f((size_t)C)};
    dbuf r[3] = {zeros_f(nc), zeros_f((size_t)C), zeros_f((size_t)C)};
    double *sq = gpu->alloc(2 * sizeof(double));
    float *p0 = hrand(nc, 1.0f);
    dbuf pe = dup_f(p0, nc, 0), pr = dup_f(p0, nc, 0), me = zeros_f(nc), mr = zeros_f(nc),
         ve = zeros_f(nc), vr = zeros_f(nc);
    dt_adamw_hyper *dh = gpu->alloc(sizeof *dh);
    dt_adamw_tensor lt = {pr.p, r[0].p, mr.p, vr.p, nc, 0.1f};
    /* issue once (the warm-up: scratch, adamw_multi_dev's list), then record;
     * the warm-up's update is mirrored on the reference parameters */
    dt_adamw_hyper h0 = dt_adamw_hyper_of(1e-3f, 0.9f, 0.95f, 1);
    gpu->from_host(dh, &h0, sizeof h0);
    for (int pass = 0; pass < 2; pass++) {
        if (pass) gpu->adamw(pe.p, r[0].p, me.p, ve.p, nc, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
        if (pass) gpu->graph_begin();
        gpu->zero(sq, 2 * sizeof(double));
        for (int k = 0; k < 3; k++) gpu->zero(r[k].p, (k ? (size_t)C : nc) * sizeof(float));
        gpu->layernorm_backward(r[0].p, r[1].p, r[2].p, dd.p, di.p, dw.p, dm.p, dr.p, N, C, DT_F32);
        gpu->sumsq_add(sq, r[0].p, nc);
        gpu->loss_sum_add(sq + 1, r[1].p, C);
        gpu->adamw_multi_dev(&lt, 1, dh, 0.9f, 0.95f, 1e-8f);
    }
    void *graph = gpu->graph_end();
    CHECK(graph != NULL, "graph: layernorm_backward, sumsq_add, loss_sum_add, adamw_multi_dev recorded");
    int same = 1;
    for (int launch = 1; launch <= 3 && graph; launch++) {
        /* new inputs and a new lr: the graph reads them when it runs */
        for (size_t i = 0; i < nc; i++) dout[i] = frand();
        gpu->from_host(dd.p, dout, nc * sizeof(float));
        dt_adamw_hyper h = dt_adamw_hyper_of(1e-3f * (float)launch, 0.9f, 0.95f, launch + 1);
        gpu->from_host(dh, &h, sizeof h);
        CHECK(gpu->graph_launch(graph) == 0, "graph: launch %d", launch);
        for (int k = 0; k < 3; k++) gpu->zero(e[k].p, (k ? (size_t)C : nc) * sizeof(float));
        gpu->layernorm_backward(e[0].p, e[1].p, e[2].p, dd.p, di.p, dw.p, dm.p, dr.p, N, C, DT_F32);
        double se = gpu->sumsq(e[0].p, nc), sg[2];
        float *hb = back(&e[1], (size_t)C);
        double le = 0;
        for (int i = 0; i < C; i++) le += hb[i];
        free(hb);
        gpu->adamw(pe.p, e[0].p, me.p, ve.p, nc, 1e-3f * (float)launch, 0.9f, 0.95f, 1e-8f, 0.1f, launch + 1);
        gpu->to_host(sg, sq, sizeof sg);
        same &= sg[0] == se && sg[1] == le;
        for (int k = 0; k < 3; k++) {
            size_t cnt = k ? (size_t)C : nc;
            float *a = back(&e[k], cnt), *b = back(&r[k], cnt);
            same &= memcmp(a, b, cnt * sizeof(float)) == 0;
            free(a), free(b);
        }
        float *a = back(&pe, nc), *b = back(&pr, nc);
        same &= memcmp(a, b, nc * sizeof(float)) == 0;
        free(a), free(b);
    }
    CHECK(same, "graph: 3 launches with new inputs and lr compute what the ops issued compute, bit for bit");
    /* layernorm backwards of ever wider rows grow the scratch (8 C bytes for one row) until it
     * moves: the graph is then stale (while cudaMalloc hands back the same address, it is not) */
    int stale = 0;
    size_t c2 = (size_t)1 << 20;
    for (; c2 <= ((size_t)1 << 26) && graph && !stale; c2 *= 2) {
        dbuf z[6] = {zeros_f(c2), zeros_f(c2), zeros_f(c2), zeros_f(c2), zeros_f(c2), zeros_f(c2)}, st = zeros_f(2);
        gpu->layernorm_backward(z[0].p, z[1].p, z[2].p, z[3].p, z[4].p, z[5].p, st.p, st.p + 1, 1, (int)c2, DT_F32);
        stale = gpu->graph_launch(graph) == -1;
        for (int k = 0; k < 6; k++) drop(&z[k]);
        drop(&st);
    }
    CHECK(stale, "graph: once the scratch moved (a row of %zu), graph_launch answers -1", c2 / 2);
    gpu->graph_destroy(graph);
    for (int k = 0; k < 3; k++) drop(&e[k]), drop(&r[k]);
    drop(&di), drop(&dw), drop(&dd), drop(&dm), drop(&dr), drop(&pe), drop(&pr), drop(&me), drop(&mr), drop(&ve),
        drop(&vr);
    gpu->free(sq), gpu->free(dh);
    free(inp), free(w), free(dout), free(mean), free(rstd), free(out), free(p0);
}

/* ---------------------------------------------------------------- bf16 */

/* The conversions must agree bit for bit (the CUDA kernels do the CPU's bit
 * arithmetic): random fp32 bit patterns (every exponent, denormals, Inf, NaN
 * payloads), random values, and the edge cases of test_kernels.c (ties both
 * ways, the largest finite bf16 and just past it, denormals, -0, +-Inf, NaN)
 * at the front. n odd, so the grid-stride loops get a ragged end. */
static uint32_t twin_u32(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

static size_t diff_bytes(const void *a, const void *b, size_t n, size_t width) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp((const char *)a + i * width, (const char *)b + i * width, width) != 0;
    return bad;
}

static void test_bf16(size_t n) {
    static const uint32_t edges[] = {
        0x3f808000u, 0x3f818000u, 0xbf818000u, 0x3f807fffu, 0x3f808001u, 0x3f7fffffu, 0x7f7f0000u,
        0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0xff7f8000u, 0x7f800000u, 0xff800000u, 0x00000000u,
        0x80000000u, 0x00000001u, 0x80000001u, 0x00008000u, 0x00018000u, 0x00008001u, 0x007f7fffu,
        0x007fffffu, 0x00800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fbfffffu, 0x7fffffffu,
    };
    size_t ne = sizeof edges / sizeof edges[0];
    float *x = malloc(n * sizeof *x), *add = malloc(n * sizeof *add);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = i < ne ? edges[i] : twin_u32();
        if (i >= ne && i % 2) x[i] = frand() * 8.0f; else memcpy(&x[i], &u, sizeof u);
        add[i] = i % 3 ? frand() * ldexpf(1.0f, -(int)(i % 12)) : x[(i * 7) % n];
    }
    uint16_t *hc = malloc(n * sizeof *hc), *hg = malloc(n * sizeof *hg);
    float *fc = malloc(n * sizeof *fc), *fg = malloc(n * sizeof *fg);
    uint16_t *dh = gpu->alloc(n * sizeof *dh);
    dbuf dx = dup_f(x, n, 0), dadd = dup_f(add, n, 0), df = dup_f(x, n, 1); /* df: 4-byte aligned only */

    cpu->to_bf16(hc, x, n);
    gpu->to_bf16(dh, dx.p, n);
    gpu->to_host(hg, dh, n * sizeof *hg);
    size_t bad = diff_bytes(hc, hg, n, sizeof *hc);
    CHECK(bad == 0, "to_bf16 n=%zu (random bits, values, %zu edge cases): bitwise equal to cpu, %zu differ", n, ne, bad);

    /* from_bf16 on every pattern the cpu just produced (NaNs included) */
    cpu->from_bf16(fc, hc, n);
    gpu->from_bf16(df.p, dh, n);
    gpu->to_host(fg, df.p, n * sizeof *fg);
    bad = diff_bytes(fc, fg, n, sizeof *fc);
    CHECK(bad == 0, "from_bf16 n=%zu: bitwise equal to cpu, %zu differ", n, bad);

    memcpy(fc, x, n * sizeof *fc);
    cpu->round_bf16(fc, n);
    gpu->from_host(df.p, x, n * sizeof *x);
    gpu->round_bf16(df.p, n);
    gpu->to_host(fg, df.p, n * sizeof *fg);
    bad = diff_bytes(fc, fg, n, sizeof *fc);
    CHECK(bad == 0, "round_bf16 n=%zu (in place, unaligned): bitwise equal to cpu, %zu differ", n, bad);

    /* acc_bf16 twice on the same accumulator: the second pass starts from
     * the first one's roundings */
    for (int pass = 0; pass < 2; pass++) {
        cpu->acc_bf16(hc, add, n);
        gpu->acc_bf16(dh, dadd.p, n);
    }
    gpu->to_host(hg, dh, n * sizeof *hg);
    bad = diff_bytes(hc, hg, n, sizeof *hc);
    CHECK(bad == 0, "acc_bf16 n=%zu, two passes (ties, overflow, Inf-Inf, NaN): bitwise equal to cpu, %zu differ", n, bad);

    gpu->free(dh);
    drop(&dx); drop(&dadd); drop(&df);
    free(x); free(add); free(hc); free(hg); free(fc); free(fg);
}

/* ---------------------------------------------------------------- cross-entropy */

static void test_xent(int N, int Vl, int v0, int V) {
    char what[160];
    size_t n = (size_t)N * Vl;
    float *l = hrand(n, 5.0f);
    int *tg = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tg[i] = (int)((frand() + 1.0f) * 0.5f * V) % V;
    tg[0] = -1;                      /* ignored row */
    if (N > 1) tg[1] = v0;           /* first local column */
    if (N > 2) tg[2] = v0 + Vl - 1;  /* last local column */
    dbuf dl = dup_f(l, n, 0);
    int *dtg = dup_i(tg, (size_t)N);
    float *rm = hrand((size_t)N, 1.0f), *se = hrand((size_t)N, 1.0f), *ta = hrand((size_t)N, 1.0f);
    float *lo = hrand((size_t)N, 1.0f), *dlo = hrand((size_t)N, 1.0f);
    for (int i = 0; i < N; i++) dlo[i] = 0.5f + 0.25f * dlo[i];
    dbuf drm = dup_f(rm, (size_t)N, 0), dse = dup_f(se, (size_t)N, 0), dta = dup_f(ta, (size_t)N, 0);
    dbuf dlos = dup_f(lo, (size_t)N, 0), ddlo = dup_f(dlo, (size_t)N, 0);
    /* xent_stats: the max and the target logit are values of the row, the
     * same in any order: bit for bit. The sum of exps (relative to that same
     * max): TOL_ELEM. Both sides sum in fp32 in another order with other
     * rescaling points (the CPU in blocks of 1024 columns, the GPU one strided
     * pair per thread, then a shuffle tree), each exp within 2 ulp: random
     * rounding leaves ~u sqrt(longest chain) = 6e-8 sqrt(1024 + 50) = 2e-6 on
     * a 50257-wide row, 1e-5 is 5x that. (A C emulation of the kernel's order,
     * with the host's expf, differed from the CPU twin by at most 8e-7 on
     * rows of 101 to 50257 logits of spread 2 to 30; the old two-pass CPU
     * sum, one sequential chain of 50257 terms, was itself 5e-5 off the
     * double sum.) A missed or inverted rescale moves the sum by a factor
     * e^(max step), O(1). */
    cpu->xent_stats(rm, se, ta, l, tg, v0, N, Vl);
    gpu->xent_stats(drm.p, dse.p, dta.p, dl.p, dtg, v0, N, Vl);
    float *grm = back(&drm, (size_t)N), *gse = back(&dse, (size_t)N), *gta = back(&dta, (size_t)N);
    CHECK(!memcmp(grm, rm, (size_t)N * sizeof(float)) && !memcmp(gta, ta, (size_t)N * sizeof(float)),
          "xent_stats N=%d Vl=%d v0=%d: row max and target logit bit for bit (targets elsewhere, ignored: 0)",
          N, Vl, v0);
    snprintf(what, sizeof what, "xent_stats N=%d Vl=%d sum of exps (online)", N, Vl);
    expect(what, &dse, se, (size_t)N, TOL_ELEM);
    /* one block per row, a fixed shuffle tree: the same bits again */
    gpu->xent_stats(drm.p, dse.p, dta.p, dl.p, dtg, v0, N, Vl);
    float *gse2 = back(&dse, (size_t)N);
    CHECK(!memcmp(gse, gse2, (size_t)N * sizeof(float)), "xent_stats N=%d Vl=%d: deterministic (twice, same bits)",
          N, Vl);
    free(grm); free(gse); free(gta); free(gse2);
    /* xent_rescale (tensor parallelism's combine): to a larger max, an equal
     * one (exact), and from an empty shard's -inf (0) */
    float *from = hrand((size_t)N, 1.0f), *to = malloc((size_t)N * sizeof(float)), *rs = malloc((size_t)N * sizeof(float));
    for (int i = 0; i < N; i++) {
        to[i] = from[i] + (i % 3 == 0 ? 0.0f : 1.5f + from[i]);
        if (i % 7 == 5) from[i] = -INFINITY;
        rs[i] = se[i];
    }
    dbuf dfrom = dup_f(from, (size_t)N, 0), dto = dup_f(to, (size_t)N, 0), drs = dup_f(rs, (size_t)N, 0);
    cpu->xent_rescale(rs, from, to, N);
    gpu->xent_rescale(drs.p, dfrom.p, dto.p, N);
    snprintf(what, sizeof what, "xent_rescale N=%d", N);
    expect(what, &drs, rs, (size_t)N, TOL_ELEM);
    drop(&dfrom); drop(&dto); drop(&drs);
    free(from); free(to); free(rs);
    /* loss and backward from the CPU's row statistics: each op alone */
    gpu->from_host(dse.p, se, (size_t)N * sizeof(float));
    cpu->xent_loss(lo, rm, se, ta, tg, N);
    gpu->xent_loss(dlos.p, drm.p, dse.p, dta.p, dtg, N);
    snprintf(what, sizeof what, "xent_loss N=%d", N);
    expect(what, &dlos, lo, (size_t)N, TOL_ELEM);
    float *dlg = hrand(n, 1.0f);
    dbuf ddlg = dup_f(dlg, n, 0);
    cpu->xent_backward(dlg, l, rm, se, tg, dlo, v0, N, Vl);
    gpu->xent_backward(ddlg.p, dl.p, drm.p, dse.p, dtg, ddlo.p, v0, N, Vl);
    snprintf(what, sizeof what, "xent_backward N=%d Vl=%d v0=%d (overwrites)", N, Vl, v0);
    expect(what, &ddlg, dlg, n, TOL_ELEM);
    /* in place, as the chunked LM head calls it (ops.h): the logits become their gradient */
    gpu->xent_backward(dl.p, dl.p, drm.p, dse.p, dtg, ddlo.p, v0, N, Vl);
    snprintf(what, sizeof what, "xent_backward N=%d Vl=%d v0=%d in place (dlogits = logits)", N, Vl, v0);
    expect(what, &dl, dlg, n, TOL_ELEM);
    drop(&dl); drop(&drm); drop(&dse); drop(&dta); drop(&dlos); drop(&ddlo); drop(&ddlg);
    gpu->free(dtg);
    free(l); free(tg); free(rm); free(se); free(ta); free(lo); free(dlo); free(dlg);
}

/* ---------------------------------------------------------------- the Llama ops */

/* n floats as an array of type t (host, malloc'd): a copy, or their bf16 */
static void *host_typed(const float *f, size_t n, dt_dtype t) {
    if (t == DT_BF16) return host16(f, n);
    void *p = malloc((n ? n : 1) * sizeof(float));
    memcpy(p, f, n * sizeof(float));
    return p;
}

/* RMSNorm, and the fused residual + RMSNorm: as the layernorm tests (TOL_ELEM:
 * warp sums against the CPU's order; one bf16 ulp more for a bf16 out; res
 * exact) */
static void test_rmsnorm(int N, int C, dt_dtype t) {
    char what[160];
    const char *ty = t == DT_BF16 ? "bf16" : "fp32";
    size_t n = (size_t)N * C, e = dt_dtype_size(t);
    double tol_out = TOL_ELEM + (t == DT_BF16 ? TOL_ULP16 : 0.0);
    float *xf = hrand(n, 2.0f), *w = hrand((size_t)C, 1.0f), *rstd = hrand((size_t)N, 1.0f);
    for (int i = 0; i < N; i++) xf[(size_t)i * C] += 3.0f;
    void *x = host_typed(xf, n, t), *out = calloc(n ? n : 1, e);
    void *dx = dup_bytes(x, n * e), *dout = dup_bytes(out, n * e);
    dbuf dw = dup_f(w, (size_t)C, 0), drstd = dup_f(rstd, (size_t)N, 0);
    cpu->rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f, t);
    gpu->rmsnorm_forward(dout, drstd.p, dx, dw.p, N, C, 1e-5f, t);
    snprintf(what, sizeof what, "rmsnorm_forward %s out N=%d C=%d", ty, N, C);
    expect_typed(what, dout, out, n, t, tol_out);
    snprintf(what, sizeof what, "rmsnorm_forward %s rstd N=%d C=%d", ty, N, C);
    expect(what, &drstd, rstd, (size_t)N, TOL_ELEM);
    /* backward alone, from the CPU's rstd; accumulating into random starts */
    float *g = hrand(n, 1.0f), *gx = hrand(n, 1.0f), *gw = hrand((size_t)C, 1.0f);
    float *gx0 = malloc(n * sizeof(float)), *gw0 = malloc((size_t)C * sizeof(float));
    memcpy(gx0, gx, n * sizeof(float)), memcpy(gw0, gw, (size_t)C * sizeof(float));
    dbuf dg = dup_f(g, n, 0), dgx = dup_f(gx, n, 0), dgw = dup_f(gw, (size_t)C, 0);
    gpu->from_host(drstd.p, rstd, (size_t)N * sizeof(float));
    cpu->rmsnorm_backward(gx, gw, g, x, w, rstd, N, C, t);
    gpu->rmsnorm_backward(dgx.p, dgw.p, dg.p, dx, dw.p, drstd.p, N, C, t);
    snprintf(what, sizeof what, "rmsnorm_backward %s dinp N=%d C=%d (accumulates)", ty, N, C);
    expect_added(what, &dgx, gx0, gx, n, TOL_ELEM);
    snprintf(what, sizeof what, "rmsnorm_backward %s dw N=%d C=%d (accumulates)", ty, N, C);
    expect_added(what, &dgw, gw0, gw, (size_t)C, TOL_ELEM);

    /* residual + RMSNorm, one pass on the device */
    float *af = hrand(n, 1.0f);
    void *res = calloc(n ? n : 1, e);
    dbuf da = dup_f(af, n, 0);
    void *dres = dup_bytes(res, n * e);
    cpu->residual_rmsnorm_forward(res, out, rstd, af, x, w, N, C, 1e-5f, t);
    gpu->residual_rmsnorm_forward(dres, dout, drstd.p, da.p, dx, dw.p, N, C, 1e-5f, t);
    snprintf(what, sizeof what, "residual_rmsnorm_forward %s res N=%d C=%d", ty, N, C);
    expect_typed(what, dres, res, n, t, TOL_EXACT);
    snprintf(what, sizeof what, "residual_rmsnorm_forward %s out N=%d C=%d", ty, N, C);
    expect_typed(what, dout, out, n, t, tol_out);
    snprintf(what, sizeof what, "residual_rmsnorm_forward %s rstd N=%d C=%d", ty, N, C);
    expect(what, &drstd, rstd, (size_t)N, TOL_ELEM);
    gpu->free(dx); gpu->free(dout); gpu->free(dres);
    drop(&dw); drop(&drstd); drop(&dg); drop(&dgx); drop(&dgw); drop(&da);
    free(xf); free(w); free(rstd); free(x); free(out); free(g); free(gx); free(gw); free(gx0); free(gw0); free(af);
    free(res);
}

/* SwiGLU on the packed [N, 2F] gate|up: expf against libm's (TOL_ELEM, one
 * bf16 ulp more for a bf16 out). pad 1: pointers one element off (the
 * kernels' one-element path). */
static void test_swiglu(int N, int F, dt_dtype t, int pad) {
    char what[160];
    const char *ty = t == DT_BF16 ? "bf16" : "fp32";
    size_t nf = (size_t)N * F, e = dt_dtype_size(t);
    float *inf_ = hrand(2 * nf, 4.0f);
    void *inp = host_typed(inf_, 2 * nf, t), *out = calloc(nf ? nf : 1, e);
    char *bin = gpu->alloc((2 * nf + 1) * e), *bout = gpu->alloc((nf + 1) * e);
    void *din = bin + pad * e, *dout = bout + pad * e;
    gpu->from_host(din, inp, 2 * nf * e);
    cpu->swiglu_forward(out, inp, N, F, t);
    gpu->swiglu_forward(dout, din, N, F, t);
    snprintf(what, sizeof what, "swiglu_forward %s N=%d F=%d%s", ty, N, F, pad ? " (unaligned)" : "");
    expect_typed(what, dout, out, nf, t, TOL_ELEM + (t == DT_BF16 ? TOL_ULP16 : 0.0));
    float *g = hrand(nf, 1.0f), *gi = hrand(2 * nf, 1.0f), *gi0 = malloc(2 * nf * sizeof(float));
    memcpy(gi0, gi, 2 * nf * sizeof(float));
    dbuf dg = dup_f(g, nf, pad), dgi = dup_f(gi, 2 * nf, pad);
    cpu->swiglu_backward(gi, inp, g, N, F, t);
    gpu->swiglu_backward(dgi.p, din, dg.p, N, F, t);
    snprintf(what, sizeof what, "swiglu_backward %s dgate, dup N=%d F=%d%s (accumulates)", ty, N, F,
             pad ? " (unaligned)" : "");
    expect_added(what, &dgi, gi0, gi, 2 * nf, TOL_ELEM);
    gpu->free(bin); gpu->free(bout); drop(&dg); drop(&dgi);
    free(inf_); free(inp); free(out); free(g); free(gi); free(gi0);
}

/* Mixture of experts (ops.h moe_*): the router row by row in the CPU's
 * order (expf against libm's: TOL_ELEM; the choices and every integer of
 * the route exactly: same comparisons of the same scores, a tie broken the
 * same way), the route with a capacity and rows starting inside a sample,
 * permute (a copy: bit for bit), unpermute and the backwards (separate
 * products and sums, no FMA, in the CPU's order: bit for bit in fp32; a
 * bf16 y is widened exactly on both sides), and the grouped GEMM (the dense
 * matmul per expert: TOL_GEMM, bf16 products as matmul's). */
static int same_ints(const int *dev, const int *ref, size_t n) {
    int *h = malloc((n ? n : 1) * sizeof(int));
    if (n) gpu->to_host(h, dev, n * sizeof(int));
    int ok = !n || !memcmp(h, ref, n * sizeof(int));
    free(h);
    return ok;
}

static void test_moe_router(int N, int E, int k, int sigmoid, int norm, int T, int row0, int with_bias) {
    char what[192];
    int G = (row0 + N - 1) / T + 1;
    float *z = hrand((size_t)N * E, 3.0f), *bias = with_bias ? hrand((size_t)E, 0.5f) : NULL;
    float *s = malloc((size_t)N * E * sizeof(float)), *w = malloc((size_t)N * k * sizeof(float));
    float *ps = malloc((size_t)G * E * sizeof(float));
    int *idx = malloc((size_t)N * k * sizeof(int));
    memcpy(s, z, (size_t)N * E * sizeof(float));
    cpu->moe_router_forward(s, idx, w, ps, s, bias, N, E, k, sigmoid, norm, T, row0);
    dbuf ds = dup_f(z, (size_t)N * E, 0), dw = zeros_f((size_t)N * k), dps = zeros_f((size_t)G * E);
    dbuf db = dup_f(bias ? bias : z, bias ? (size_t)E : 1, 0);
    int *didx = dup_i(idx, (size_t)N * k);
    gpu->moe_router_forward(ds.p, didx, dw.p, dps.p, ds.p, bias ? db.p : NULL, N, E, k, sigmoid, norm, T, row0);
    snprintf(what, sizeof what, "moe_router_forward %s%s%s N=%d E=%d k=%d T=%d row0=%d", sigmoid ? "sigmoid" : "softmax",
             norm ? " norm" : "", bias ? " bias" : "", N, E, k, T, row0);
    CHECK(same_ints(didx, idx, (size_t)N * k), "%s: the same choices", what);
    expect(what, &ds, s, (size_t)N * E, TOL_ELEM);
    expect(what, &dw, w, (size_t)N * k, TOL_ELEM);
    expect(what, &dps, ps, (size_t)G * E, TOL_ELEM);
    /* backward from the CPU's forward, into random starts */
    float *gw = hrand((size_t)N * k, 1.0f), *ga = hrand((size_t)G * E, 1.0f), *dz = hrand((size_t)N * E, 1.0f);
    float *dz0 = malloc((size_t)N * E * sizeof(float));
    memcpy(dz0, dz, (size_t)N * E * sizeof(float));
    dbuf hs = dup_f(s, (size_t)N * E, 0), hw = dup_f(w, (size_t)N * k, 0), dgw = dup_f(gw, (size_t)N * k, 0);
    dbuf dga = dup_f(ga, (size_t)G * E, 0), ddz = dup_f(dz, (size_t)N * E, 0);
    int *hidx = dup_i(idx, (size_t)N * k);
    cpu->moe_router_backward(dz, s, idx, w, gw, ga, N, E, k, sigmoid, norm, T, row0);
    gpu->moe_router_backward(ddz.p, hs.p, hidx, hw.p, dgw.p, dga.p, N, E, k, sigmoid, norm, T, row0);
    snprintf(what, sizeof what, "moe_router_backward %s%s N=%d E=%d k=%d (accumulates)", sigmoid ? "sigmoid" : "softmax",
             norm ? " norm" : "", N, E, k);
    expect_added(what, &ddz, dz0, dz, (size_t)N * E, TOL_ELEM);
    drop(&ds), drop(&dw), drop(&dps), drop(&db), drop(&hs), drop(&hw), drop(&dgw), drop(&dga), drop(&ddz);
    gpu->free(didx), gpu->free(hidx);
    free(z), free(bias), free(s), free(w), free(ps), free(idx), free(gw), free(ga), free(dz), free(dz0);
}

static void test_moe_route(int N, int E, int k, int cap, int T, int row0) {
    int G = (row0 + N - 1) / T + 1;
    size_t NK = (size_t)N * k;
    int *idx = malloc(NK * sizeof(int)), *dst = malloc(NK * sizeof(int)), *src = malloc(NK * sizeof(int));
    int *counts = malloc((size_t)E * sizeof(int)), *chosen = malloc((size_t)G * E * sizeof(int));
    int *before = malloc((size_t)G * E * sizeof(int));
    for (int i = 0; i < G * E; i++) before[i] = i < E ? i % 3 : 0;
    for (int n = 0; n < N; n++) /* k distinct experts a row, skewed towards the low ones */
        for (int j = 0; j < k; j++) idx[(size_t)n * k + j] = (int)((unsigned)(n * 7 + j * (E / k + 1) + (n % 3)) % E);
    for (int n = 0; n < N; n++)
        for (int j = 1; j < k; j++)
            for (int i = 0; i < j; i++)
                if (idx[(size_t)n * k + j] == idx[(size_t)n * k + i]) idx[(size_t)n * k + j] = (idx[(size_t)n * k + j] + 1) % E, i = -1;
    cpu->moe_route(dst, src, counts, chosen, idx, before, N, E, k, cap, T, row0);
    int M = 0;
    for (int e = 0; e < E; e++) M += counts[e];
    int *didx = dup_i(idx, NK), *dbef = dup_i(before, (size_t)G * E);
    int *ddst = gpu->alloc(NK * sizeof(int)), *dsrc = gpu->alloc(NK * sizeof(int));
    int *dcounts = gpu->alloc((size_t)E * sizeof(int)), *dchosen = gpu->alloc((size_t)G * E * sizeof(int));
    gpu->moe_route(ddst, dsrc, dcounts, dchosen, didx, dbef, N, E, k, cap, T, row0);
    CHECK(same_ints(ddst, dst, NK) && same_ints(dsrc, src, (size_t)M) && same_ints(dcounts, counts, (size_t)E) &&
              same_ints(dchosen, chosen, (size_t)G * E),
          "moe_route N=%d E=%d k=%d cap=%d T=%d row0=%d: dst, src, counts, chosen bit for bit (%d of %zu kept)", N, E,
          k, cap, T, row0, M, NK);
    gpu->free(didx), gpu->free(dbef), gpu->free(ddst), gpu->free(dsrc), gpu->free(dcounts), gpu->free(dchosen);
    free(idx), free(dst), free(src), free(counts), free(chosen), free(before);
}

static void test_moe_permute(int N, int E, int k, int C, int cap, dt_dtype t) {
    char what[160];
    const char *ty = t == DT_BF16 ? "bf16" : "fp32";
    size_t NK = (size_t)N * k, es = dt_dtype_size(t);
    int *idx = malloc(NK * sizeof(int)), *dst = malloc(NK * sizeof(int)), *src = malloc(NK * sizeof(int));
    int counts[64], chosen[64 * 8];
    for (int n = 0; n < N; n++)
        for (int j = 0; j < k; j++) idx[(size_t)n * k + j] = (n + j * 3) % E;
    cpu->moe_route(dst, src, counts, chosen, idx, NULL, N, E, k, cap, N, 0);
    int M = 0;
    for (int e = 0; e < E; e++) M += counts[e];
    float *xf = hrand((size_t)N * C, 1.0f), *yf = hrand(NK * C, 1.0f), *w = hrand(NK, 1.0f);
    void *x = host_typed(xf, (size_t)N * C, t), *y = host_typed(yf, NK * C, t), *xe = calloc(NK * C, es);
    int *ddst = dup_i(dst, NK), *dsrc = dup_i(src, NK);
    void *dx = dup_bytes(x, (size_t)N * C * es), *dy = dup_bytes(y, NK * C * es), *dxe = dup_bytes(xe, NK * C * es);
    cpu->moe_permute(xe, x, src, M, C, t);
    gpu->moe_permute(dxe, dx, dsrc, M, C, t);
    snprintf(what, sizeof what, "moe_permute %s N=%d k=%d C=%d (%d rows)", ty, N, k, C, M);
    expect_typed(what, dxe, xe, (size_t)M * C, t, 0.0);
    float *out = hrand((size_t)N * C, 1.0f), *out0 = malloc((size_t)N * C * sizeof(float));
    memcpy(out0, out, (size_t)N * C * sizeof(float));
    dbuf dout = dup_f(out, (size_t)N * C, 0), dwt = dup_f(w, NK, 0);
    cpu->moe_unpermute(out, y, dst, w, N, k, C, t, 1);
    gpu->moe_unpermute(dout.p, dy, ddst, dwt.p, N, k, C, t, 1);
    snprintf(what, sizeof what, "moe_unpermute %s N=%d k=%d C=%d (accumulates)", ty, N, k, C);
    expect(what, &dout, out, (size_t)N * C, 0.0);
    float *g = hrand((size_t)N * C, 1.0f), *gy = hrand(NK * C, 1.0f), *gw = hrand(NK, 1.0f), *gx = hrand((size_t)N * C, 1.0f);
    dbuf dg = dup_f(g, (size_t)N * C, 0), dgy = dup_f(gy, NK * C, 0), dgw = dup_f(gw, NK, 0), dgx = dup_f(gx, (size_t)N * C, 0);
    cpu->moe_unpermute_backward(gy, gw, g, y, dst, w, N, k, C, t);
    gpu->moe_unpermute_backward(dgy.p, dgw.p, dg.p, dy, ddst, dwt.p, N, k, C, t);
    snprintf(what, sizeof what, "moe_unpermute_backward %s dy, dw N=%d k=%d C=%d (accumulate)", ty, N, k, C);
    expect(what, &dgy, gy, (size_t)M * C, 0.0);
    expect(what, &dgw, gw, NK, 0.0);
    cpu->moe_permute_backward(gx, gy, dst, N, k, C);
    gpu->moe_permute_backward(dgx.p, dgy.p, ddst, N, k, C);
    snprintf(what, sizeof what, "moe_permute_backward N=%d k=%d C=%d (accumulates)", N, k, C);
    expect(what, &dgx, gx, (size_t)N * C, 0.0);
    drop(&dout), drop(&dwt), drop(&dg), drop(&dgy), drop(&dgw), drop(&dgx);
    gpu->free(ddst), gpu->free(dsrc), gpu->free(dx), gpu->free(dy), gpu->free(dxe);
    free(idx), free(dst), free(src), free(xf), free(yf), free(w), free(x), free(y), free(xe), free(out), free(out0);
    free(g), free(gy), free(gw), free(gx);
}

static void test_moe_grouped(int IC, int OC, dt_dtype t) {
    char what[160];
    int counts[4] = {37, 0, 5, 64}, G = 4, R = 106;
    size_t es = dt_dtype_size(t);
    float *inf_ = hrand((size_t)R * IC, 1.0f), *wf = hrand((size_t)G * OC * IC, 1.0f);
    void *in = host_typed(inf_, (size_t)R * IC, t), *w = host_typed(wf, (size_t)G * OC * IC, t);
    void *out = calloc((size_t)R * OC, es);
    void *din = dup_bytes(in, (size_t)R * IC * es), *dw = dup_bytes(w, (size_t)G * OC * IC * es);
    void *dout = dup_bytes(out, (size_t)R * OC * es);
    act16_products(t == DT_BF16);
    cpu->moe_grouped_forward(out, in, w, counts, G, IC, OC, t, t);
    gpu->moe_grouped_forward(dout, din, dw, counts, G, IC, OC, t, t);
    snprintf(what, sizeof what, "moe_grouped_forward %s IC=%d OC=%d", t == DT_BF16 ? "bf16" : "fp32", IC, OC);
    expect_typed(what, dout, out, (size_t)R * OC, t, TOL_GEMM + (t == DT_BF16 ? TOL_ULP16 : 0.0));
    float *g = hrand((size_t)R * OC, 1.0f), *gi = hrand((size_t)R * IC, 1.0f), *gwt = hrand((size_t)G * OC * IC, 1.0f);
    float *gi0 = malloc((size_t)R * IC * sizeof(float)), *gw0 = malloc((size_t)G * OC * IC * sizeof(float));
    memcpy(gi0, gi, (size_t)R * IC * sizeof(float)), memcpy(gw0, gwt, (size_t)G * OC * IC * sizeof(float));
    dbuf dg = dup_f(g, (size_t)R * OC, 0), dgi = dup_f(gi, (size_t)R * IC, 0), dgw = dup_f(gwt, (size_t)G * OC * IC, 0);
    cpu->moe_grouped_backward(gi, gwt, g, in, w, counts, G, IC, OC, t);
    gpu->moe_grouped_backward(dgi.p, dgw.p, dg.p, din, dw, counts, G, IC, OC, t);
    double tol = t == DT_BF16 ? TOL_BF16 : TOL_GEMM;
    snprintf(what, sizeof what, "moe_grouped_backward %s dinp IC=%d OC=%d (accumulates)", t == DT_BF16 ? "bf16" : "fp32", IC, OC);
    expect_added(what, &dgi, gi0, gi, (size_t)R * IC, tol);
    snprintf(what, sizeof what, "moe_grouped_backward %s dw IC=%d OC=%d (accumulates; the empty expert's untouched)",
             t == DT_BF16 ? "bf16" : "fp32", IC, OC);
    expect_added(what, &dgw, gw0, gwt, (size_t)G * OC * IC, tol);
    act16_products(0);
    drop(&dg), drop(&dgi), drop(&dgw);
    gpu->free(din), gpu->free(dw), gpu->free(dout);
    free(inf_), free(wf), free(in), free(w), free(out), free(g), free(gi), free(gwt), free(gi0), free(gw0);
}

/* RoPE on the q and k heads of a qkv buffer (v and a spare column left as
 * they are), rows at scattered positions: the table, the forward and the
 * backward all BIT FOR BIT (ops.h: the same table bits, two rounded products
 * and their rounded sum on both sides). ld odd or hs/2 odd: the one-pair
 * path; else two pairs a thread. */
static void test_rope(int N, int NH, int NKV, int hs, int spare, dt_dtype t) {
    char what[200];
    const char *ty = t == DT_BF16 ? "bf16" : "fp32";
    int maxp = 3 * N + 5, ld = (NH + 2 * NKV) * hs + spare;
    size_t n = (size_t)N * ld, e = dt_dtype_size(t), ncs = (size_t)maxp * hs;
    float *cs = malloc(ncs * sizeof(float)), *dcs_h = malloc(ncs * sizeof(float));
    float *dcs = gpu->alloc(ncs * sizeof(float));
    cpu->rope_table(cs, maxp, hs, 500000.0f);
    gpu->rope_table(dcs, maxp, hs, 500000.0f);
    gpu->to_host(dcs_h, dcs, ncs * sizeof(float));
    CHECK(!memcmp(cs, dcs_h, ncs * sizeof(float)), "rope_table max_pos=%d hs=%d: the same bits on both backends", maxp,
          hs);
    int *pos = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) pos[i] = (int)((i * 7919u + 13u) % (unsigned)maxp); /* packed, cp-like: any order */
    int *dpos = dup_i(pos, (size_t)N);
    float *xf = hrand(n, 2.0f);
    void *x = host_typed(xf, n, t), *got = malloc(n * e);
    void *dx = dup_bytes(x, n * e);
    cpu->rope_forward(x, ld, NH + NKV, hs, pos, cs, N, t);
    gpu->rope_forward(dx, ld, NH + NKV, hs, dpos, dcs, N, t);
    gpu->to_host(got, dx, n * e);
    snprintf(what, sizeof what, "rope_forward %s N=%d NH=%d NKV=%d hs=%d ld=%d: bit for bit", ty, N, NH, NKV, hs, ld);
    CHECK(!memcmp(got, x, n * e), "%s (%zu of %zu bytes differ)", what, diff_bytes(got, x, n, e), n * e);
    float *g = hrand(n, 1.0f), *gback = malloc(n * sizeof(float));
    dbuf dg = dup_f(g, n, 0);
    cpu->rope_backward(g, ld, NH + NKV, hs, pos, cs, N);
    gpu->rope_backward(dg.p, ld, NH + NKV, hs, dpos, dcs, N);
    gpu->to_host(gback, dg.p, n * sizeof(float));
    snprintf(what, sizeof what, "rope_backward N=%d NH=%d NKV=%d hs=%d ld=%d: bit for bit", N, NH, NKV, hs, ld);
    CHECK(!memcmp(gback, g, n * sizeof(float)), "%s", what);
    gpu->free(dcs); gpu->free(dpos); gpu->free(dx); drop(&dg);
    free(cs); free(dcs_h); free(pos); free(xf); free(x); free(got); free(g); free(gback);
}

/* ---------------------------------------------------------------- training */

typedef struct {
    job_model spec;
    int B, steps;
    float lr;
    int bf16; /* mixed precision: bf16 weights and activations, fp32 master (model_precision) */
} train_case;

/* Batch of step k: a pure function of (seed, k), the same for both backends.
 * GPT: sequences with a learnable rule (next = (3 cur + 1) mod V, with 10%
 * noise); ViT: images whose mean encodes the label. */
static void make_batch(const train_case *tc, int k, int *tok, int *tgt, float *img, int *lab) {
    const job_model *s = &tc->spec;
    uint64_t key = rng_key((uint64_t)k, "gpu-twin-batch");
    if (job_model_is_lm(s)) {
        int T = s->seq_len, V = s->vocab_size;
        for (int b = 0; b < tc->B; b++) {
            int cur = (int)rng_below(key, (uint64_t)b, (uint64_t)V);
            for (int t = 0; t <= T; t++) {
                uint64_t idx = 1000 + (uint64_t)b * 1000 + (uint64_t)t;
                int next = rng_below(key, idx, 10) == 0 ? (int)rng_below(key, idx + 500000, (uint64_t)V)
                                                         : (3 * cur + 1) % V;
                if (t < T) tok[b * T + t] = cur;
                if (t > 0) tgt[b * T + t - 1] = cur;
                cur = next;
            }
        }
    } else {
        size_t per = (size_t)s->channels * s->image_size * s->image_size;
        for (int b = 0; b < tc->B; b++) {
            lab[b] = (int)rng_below(key, (uint64_t)b, (uint64_t)s->n_classes);
            for (size_t i = 0; i < per; i++)
                img[(size_t)b * per + i] = rng_normal(key, 100000 + (uint64_t)b * per + i) * 0.5f +
                                           (float)lab[b] / s->n_classes - 0.5f;
        }
    }
}

/* Runs the training and writes the per-step mean loss into losses[]. */
static int run_training(const dt_ops *ops, const train_case *tc, double *losses) {
    const job_model *s = &tc->spec;
    int L = s->n_layer;
    model_shard sh = {.tp_rank = 0, .tp_size = 1, .unit_begin = 0, .unit_end = L + 2};
    model_precision prec = {.bf16 = tc->bf16, .grad_bf16 = tc->bf16};
    ops->set_bf16_products(tc->bf16); /* as the worker sets it for train.precision: bf16 */
    model *m = model_create_prec(s, &sh, ops, RECOMPUTE_NONE, &prec);
    if (!m) return -1;
    model_acts *a = model_acts_create(m, tc->B);
    job_train t;
    memset(&t, 0, sizeof t);
    t.beta1 = 0.9; t.beta2 = 0.95; t.eps = 1e-8; t.weight_decay = 0.1;
    optim *o = optim_create(m, ops, &t, NULL, NULL);
    if (!a || !o) return -1;
    model_init_params(m, 1234);
    int T = job_model_is_lm(s) ? s->seq_len : 1;
    size_t per = (size_t)s->channels * s->image_size * s->image_size;
    int *tok = calloc((size_t)tc->B * T, sizeof(int)), *tgt = calloc((size_t)tc->B * T, sizeof(int));
    float *img = calloc((size_t)tc->B * (per ? per : 1), sizeof(float));
    int *lab = calloc((size_t)tc->B, sizeof(int));
    for (int k = 0; k < tc->steps; k++) {
        make_batch(tc, k, tok, tgt, img, lab);
        model_batch mb = {.B = tc->B, .tokens = tok, .targets = tgt, .images = img, .labels = lab};
        int count = job_model_is_lm(s) ? tc->B * T : tc->B;
        model_zero_grads(m);
        double loss = model_forward(m, a, &mb, NULL);
        model_backward(m, a, &mb, 1.0f / (float)count);
        optim_step(o, tc->lr, k + 1, NULL, NULL, 1.0f);
        losses[k] = loss / count;
    }
    free(tok); free(tgt); free(img); free(lab);
    optim_destroy(o);
    model_acts_destroy(a);
    model_destroy(m);
    ops->set_bf16_products(0);
    return 0;
}

static void test_training(const char *name, const train_case *tc) {
    double lc[64], lg[64];
    int rc = run_training(cpu, tc, lc), rg = run_training(gpu, tc, lg);
    CHECK(rc == 0 && rg == 0, "%s: model, activations and optimizer created on both backends", name);
    if (rc || rg) return;
    double tol1 = tc->bf16 ? TOL_STEP1_BF16 : TOL_STEP1, tol = tc->bf16 ? TOL_TRAIN_BF16 : TOL_TRAIN;
    double e1 = fabs(lg[0] - lc[0]) / fmax(fabs(lc[0]), 1e-12);
    CHECK(e1 <= tol1, "%s: step 1 loss (forward, same weights) cuda %.6f cpu %.6f: rel diff "
          "%.2e <= %.0e", name, lg[0], lc[0], e1, tol1);
    double worst = 0;
    int at = 0;
    for (int k = 0; k < tc->steps; k++) {
        double e = fabs(lg[k] - lc[k]) / fmax(fabs(lc[k]), 1e-12);
        if (!(e <= worst)) { worst = e; at = k + 1; }
    }
    CHECK(worst <= tol,
          "%s: %d steps, cuda loss follows cpu: max rel diff %.2e (step %d) <= %.0e; "
          "loss %.4f -> %.4f (cpu %.4f -> %.4f)", name, tc->steps, worst, at, tol,
          lg[0], lg[tc->steps - 1], lc[0], lc[tc->steps - 1]);
    CHECK(lg[tc->steps - 1] < lg[0], "%s: cuda run learns (loss %.4f -> %.4f)", name, lg[0],
          lg[tc->steps - 1]);
}

int main(void) {
    gpu = dt_ops_cuda();
    if (!gpu) {
        printf("test-gpu: no CUDA device: skipped\n");
        return 0;
    }
    printf("# device: %s\n", device_name());

    test_memory();

    test_embedding(37, 19, 50, 10, 23); /* tokens outside [v0, v0+vn) give zeros */
    test_embedding(1000, 768, 5000, 0, 5000);
    test_posadd(3, 7, 13);
    test_posadd(4, 197, 192);
    test_patch(3, 3, 12, 4, 17);
    test_patch(4, 1, 28, 7, 64);

    test_layernorm(37, 77);
    test_layernorm(5, 3);
    test_layernorm(1024, 768);

    test_matmul(37, 33, 17, 1, 0, TOL_GEMM);
    test_matmul(37, 33, 17, 0, 0, TOL_GEMM);
    test_matmul(37, 33, 17, 1, 1, TOL_GEMM); /* every pointer 4-byte aligned only */
    test_matmul(5, 1, 3, 1, 0, TOL_GEMM);
    test_matmul(256, 768, 2304, 1, 0, TOL_GEMM);
    test_matmul(256, 3072, 768, 1, 1, TOL_GEMM);
    test_matmul_gelu(256, 768, 3072, 1, 0); /* GPT-2's fc: the epilogue */
    test_matmul_gelu(64, 64, 256, 0, 0);
    test_matmul_gelu(37, 33, 20, 1, 1);     /* unaligned: the two ops */
    test_matmul_gelu(9, 16, 12, 1, 0);      /* OC not a multiple of 8: the two ops */
    test_matmul_dgelu(256, 3072, 768, 0);   /* GPT-2's mlp projection: the epilogue */
    test_matmul_dgelu(37, 20, 33, 1);       /* unaligned: the two steps */
    test_matmul_dgelu(9, 12, 16, 0);        /* IC not a multiple of 8: the two steps */
    set_tf32(1);
    test_matmul(256, 768, 768, 1, 0, TOL_TF32);
    set_tf32(0);
    gpu->set_bf16_products(1);
    bf16_values = 1; /* exact narrowing: only the summation order differs */
    test_matmul(256, 768, 2304, 1, 0, TOL_GEMM);
    test_matmul(37, 33, 17, 1, 1, TOL_GEMM);
    test_matmul(5, 1, 3, 0, 0, TOL_GEMM);
    bf16_values = 0; /* fp32 operands: rounded once on the way in */
    test_matmul(256, 3072, 768, 1, 0, TOL_BF16);
    gpu->set_bf16_products(0);
    /* activations stored in bf16: with the run's bf16 products (mixed
     * precision) and without them (a bf16 input still makes a bf16 product) */
    for (int b16 = 1; b16 >= 0; b16--) {
        act16_products(b16);
        test_matmul_act16(256, 768, 2304, 1, 0, DT_BF16); /* GPT-2's qkv: the bias into a bf16 D */
        test_matmul_act16(256, 3072, 768, 1, 0, DT_F32);  /* a row-parallel layer: fp32 partial sums */
        test_matmul_act16(37, 33, 17, 1, 1, DT_BF16);     /* unaligned: the bias seeded into fp32 rows */
        test_matmul_act16(37, 33, 17, 0, 0, DT_BF16);     /* no bias: straight into the bf16 D */
        test_matmul_act16(37, 33, 17, 1, 1, DT_F32);
        test_matmul_act16(5, 1, 3, 1, 0, DT_BF16);        /* fewer than two rows' worth: rows one at a time */
        test_matmul_f32_to_act16(37, 33, 17);
        test_matmul_gelu_act16(256, 768, 3072, 1, 0);     /* GPT-2's fc: GELU_AUX_BIAS, bf16 D and aux */
        test_matmul_gelu_act16(64, 64, 256, 0, 0);        /* GELU_AUX, no bias */
        test_matmul_gelu_act16(37, 33, 20, 1, 1);         /* unaligned: fp32 rows, both rounded in one pass */
        test_matmul_gelu_act16(9, 16, 12, 1, 0);          /* OC not a multiple of 8: the same */
        test_matmul_dgelu_act16(256, 3072, 768, 0);       /* GPT-2's mlp projection: DGELU with a bf16 aux */
        test_matmul_dgelu_act16(37, 20, 33, 1);           /* unaligned: the two steps */
        test_matmul_dgelu_act16(9, 12, 16, 0);            /* IC not a multiple of 8: the two steps */
    }
    act16_products(0);

    test_attention(2, 17, 12, 3, 3, 1);
    test_attention(2, 17, 12, 3, 3, 0);
    test_attention(1, 1, 8, 2, 2, 1);
    test_attention(2, 128, 64, 4, 4, 1);
    test_attention(2, 65, 192, 3, 3, 0); /* ViT-like: 64 patches + class token */
    /* blockwise attention, each shape in fp32 and in bf16: tiles of 64 rows
     * and keys (32 for some hs 128 passes), so the sizes below leave ragged
     * tiles; hs 8, 32, 48 (padded to 64) and 128 take the tiled kernels, 160
     * the simple ones */
    for (int bf = 0; bf <= 1; bf++) {
        test_attention_block(2, 16, 8, 8, 16, 2, 2, 1, 0, bf);         /* the diagonal block, then a whole one */
        test_attention_block(1, 40, 20, 20, 24, 3, 3, 0, 0, bf);       /* full attention */
        test_attention_block(1, 2600, 1300, 1300, 64, 2, 2, 1, 0, bf); /* more keys than a simple kernel's tile */
        test_attention_block(2, 300, 200, 150, 256, 4, 4, 1, 37, bf);  /* hs 64, Tq != Tk, a cp block's shift */
        test_attention_block(2, 300, 130, 257, 128, 4, 4, 0, 0, bf);   /* hs 32, full, more keys than queries */
        test_attention_block(1, 200, 100, 180, 128, 2, 2, 1, -50, bf); /* rows 0..49 see no key: out 0, lse -inf */
        test_attention_block(1, 150, 150, 150, 256, 2, 2, 1, 0, bf);   /* hs 128 */
        test_attention_block(1, 100, 100, 100, 96, 2, 2, 1, 0, bf);    /* hs 48 */
        test_attention_block(1, 70, 70, 70, 320, 2, 2, 1, 0, bf);      /* hs 160: the simple kernels */
        test_attention_block(2, 1024, 1024, 1024, 768, 12, 12, 1, 0, bf); /* GPT-2 124M's attention, one block */
        test_attention_block(4, 197, 197, 197, 768, 12, 12, 0, 0, bf);  /* ViT-B/16's: 196 patches + class token */
    }
    /* the same with bf16 activations (t = DT_BF16), in both arithmetic
     * modes. Naive: B 2 runs the backward a sample at a time, B 1 by chunks
     * of rows (its [T, T] scratch holds fewer), T 1 borrows the backend's
     * scratch; hs 160 takes the simple kernels. */
    for (int bf = 0; bf <= 1; bf++) {
        test_attention_bf16(2, 17, 12, 3, 3, 1, bf);
        test_attention_bf16(2, 17, 12, 3, 3, 0, bf);
        test_attention_bf16(1, 1, 8, 2, 2, 1, bf);
        test_attention_bf16(1, 128, 64, 4, 4, 1, bf);
        test_attention_bf16(2, 65, 192, 3, 3, 0, bf); /* ViT-like; the last chunk of rows is one row */
        test_attention_bf16(1, 40, 320, 2, 2, 1, bf);
        for (int ob = 0; ob <= 1; ob++) {
            dt_dtype ot = ob ? DT_BF16 : DT_F32; /* fp32: a cp partial's out */
            test_attention_block_bf16(2, 16, 8, 8, 16, 2, 2, 1, 0, bf, ot);         /* rows Tq..Ts kept */
            test_attention_block_bf16(1, 30, 30, 30, 21, 3, 3, 1, 0, bf, ot);       /* hs 7: element-wise loads */
            test_attention_block_bf16(2, 300, 200, 150, 256, 4, 4, 1, 37, bf, ot);  /* hs 64, a cp block's shift */
            test_attention_block_bf16(1, 200, 100, 180, 128, 2, 2, 1, -50, bf, ot); /* rows that see no key */
            test_attention_block_bf16(1, 70, 70, 70, 320, 2, 2, 1, 0, bf, ot);      /* hs 160: the simple kernels */
        }
        test_attention_block_bf16(1, 40, 20, 20, 24, 3, 3, 0, 0, bf, DT_BF16);     /* hs 8, full */
        test_attention_block_bf16(1, 150, 150, 150, 256, 2, 2, 1, 0, bf, DT_BF16); /* hs 128 */
        test_attention_block_bf16(1, 100, 100, 100, 96, 2, 2, 1, 0, bf, DT_BF16);  /* hs 48: padded to 64 */
        test_attention_block_bf16(2, 1024, 1024, 1024, 768, 12, 12, 1, 0, bf, DT_BF16); /* GPT-2 124M's */
        test_attention_block_bf16(4, 197, 197, 197, 768, 12, 12, 0, 0, bf, DT_BF16);   /* ViT-B/16's */
    }
    /* document masking (segment ids of packed samples, ops.h): the tiled
     * kernels at hs 8, 32, 64 and 128 and the simple ones at hs 160, fp32
     * and bf16 activations, causal, full, a cp block's shift, rows past a
     * sample's keys, GQA; samples of 1 to 200 rows cut tiles of 64 */
    for (int bf = 0; bf <= 1; bf++) {
        attention_block_case(2, 300, 300, 300, 256, 4, 4, 1, 0, bf, 1);   /* hs 64, the model's one block */
        attention_block_case(2, 300, 200, 150, 256, 4, 4, 1, 37, bf, 1);  /* a cp block's shift */
        attention_block_case(1, 40, 20, 20, 24, 3, 3, 0, 0, bf, 1);       /* hs 8, full */
        attention_block_case(2, 300, 130, 257, 128, 4, 4, 0, 0, bf, 1);   /* hs 32, more keys than queries */
        attention_block_case(1, 200, 100, 180, 128, 2, 2, 1, -50, bf, 1); /* rows that see no key */
        attention_block_case(1, 150, 150, 150, 256, 2, 2, 1, 0, bf, 1);   /* hs 128 */
        attention_block_case(1, 70, 70, 70, 320, 2, 2, 1, 0, bf, 1);      /* hs 160: the simple kernels */
        attention_block_case(1, 2600, 1300, 1300, 64, 2, 2, 1, 0, bf, 1); /* more keys than a simple tile */
        attention_block_case(2, 300, 200, 150, 512, 8, 2, 1, 37, bf, 1);  /* GQA */
        attention_block_bf16_case(2, 300, 300, 300, 256, 4, 4, 1, 0, bf, DT_BF16, 1);
        attention_block_bf16_case(2, 300, 200, 150, 256, 4, 4, 1, 37, bf, DT_F32, 1);
        attention_block_bf16_case(1, 150, 150, 150, 256, 2, 2, 1, 0, bf, DT_BF16, 1);
        attention_block_bf16_case(1, 70, 70, 70, 480, 3, 1, 1, 0, bf, DT_BF16, 1);
    }
    for (int ob = 0; ob <= 1; ob++) {
        dt_dtype dt = ob ? DT_BF16 : DT_F32;
        test_attention_decode(1, 8, 2, 2, dt);
        test_attention_decode(300, 64, 4, 4, dt);  /* more keys than the kernel's threads */
        test_attention_decode(300, 256, 8, 2, dt); /* GQA: 4 query heads a kv head */
        test_attention_decode(77, 192, 3, 1, dt);  /* MQA */
    }

    test_moe_router(37, 8, 2, 0, 1, 16, 0, 0);   /* Mixtral's: softmax, normalised top 2 */
    test_moe_router(64, 64, 8, 1, 1, 32, 5, 1);  /* DeepSeek-V3's: sigmoid + bias, top 8; rows start mid-sample */
    test_moe_router(5, 3, 1, 0, 0, 5, 0, 1);     /* Switch's top 1 */
    test_moe_route(300, 8, 2, 0, 100, 0);
    test_moe_route(300, 8, 2, 40, 100, 0);       /* a capacity: drops */
    test_moe_route(301, 64, 6, 20, 64, 17);      /* rows from inside a sample, counts before them */
    test_moe_route(50, 2000, 2, 0, 50, 0);       /* more experts than a block's threads */
    for (int b = 0; b <= 1; b++) {
        dt_dtype t = b ? DT_BF16 : DT_F32;
        test_moe_permute(45, 8, 2, 33, 0, t);
        test_moe_permute(45, 8, 3, 64, 12, t);   /* capacity drops: -1 entries */
        test_moe_grouped(64, 96, t);
        test_moe_grouped(33, 17, t);
    }

    /* grouped-query attention (NKV < NH kv heads): naive, blockwise (the
     * tiled kernels at hs 64 and 128, the simple ones at hs 160), Llama 3
     * 8B's heads (32 of hs 128 over 8 kv heads) on a short sequence */
    test_attention(2, 17, 16, 4, 2, 1);
    test_attention(2, 33, 48, 6, 1, 0);
    for (int bf = 0; bf <= 1; bf++) {
        test_attention_block(2, 300, 200, 150, 512, 8, 2, 1, 37, bf); /* hs 64, 4 query heads a kv head */
        test_attention_block(1, 150, 150, 150, 512, 4, 1, 1, 0, bf);  /* hs 128, MQA */
        test_attention_block(1, 70, 70, 70, 480, 3, 1, 1, 0, bf);     /* hs 160: the simple kernels */
        test_attention_block(1, 256, 256, 256, 4096, 32, 8, 1, 0, bf); /* Llama 3 8B's heads */
        test_attention_bf16(2, 17, 16, 4, 2, 1, bf);
        test_attention_bf16(1, 40, 320, 2, 1, 1, bf);
        test_attention_block_bf16(2, 300, 200, 150, 512, 8, 2, 1, 37, bf, DT_BF16);
        test_attention_block_bf16(1, 70, 70, 70, 480, 3, 1, 1, 0, bf, DT_F32);
    }
    for (int ob = 0; ob <= 1; ob++) {
        dt_dtype dt = ob ? DT_BF16 : DT_F32;
        test_rmsnorm(64, 4096, dt); /* Llama 3 8B's d_model */
        test_rmsnorm(5, 37, dt);
        test_swiglu(64, 14336, dt, 0); /* Llama 3 8B's d_ff */
        test_swiglu(7, 33, dt, 0);     /* F odd: one element a thread */
        test_swiglu(9, 24, dt, 1);     /* unaligned pointers */
        test_rope(300, 32, 8, 128, 0, dt); /* Llama 3 8B's q and k heads */
        test_rope(17, 9, 3, 64, 1, dt);    /* SmolLM's heads; ld odd: one pair a thread */
        test_rope(5, 2, 1, 6, 0, dt);      /* hs/2 odd */
    }

    test_elementwise(1000003);
    test_elementwise(7);
    test_elementwise_act16(1000003);
    test_elementwise_act16(7);
    test_dropout(512, 96, 4096, 1000, 0.1f);
    test_dropout(3, 5, 5, 0, 0.5f);
    test_layernorm_act16(64, 768);
    test_layernorm_act16(5, 37);
    test_residual_layernorm(64, 768, DT_F32);
    test_residual_layernorm(64, 768, DT_BF16);
    test_residual_layernorm(5, 37, DT_BF16);
    test_adamw(100003);
    test_adamw_multi();
    for (int gb = 0; gb <= 1; gb++) {
        test_adamw_mixed_multi(gb, 1.0f);
        test_adamw_mixed_multi(gb, 0.37f);
    }
    test_device_scalars();
    test_graph();
    test_bf16(1000003);
    test_bf16(29);

    test_xent(37, 101, 50, 300); /* vocab shard [50, 151) of 300 */
    test_xent(4, 50257, 0, 50257);
    test_xent(5, 25128, 25129, 50257); /* GPT-2's second tp-2 shard */
    test_xent(3, 1, 0, 1);

    train_case gpt = {.B = 4, .steps = 50, .lr = 3e-3f};
    gpt.spec.kind = MODEL_GPT;
    gpt.spec.n_layer = 2; gpt.spec.n_head = 4; gpt.spec.d_model = 64; gpt.spec.d_ff = 256;
    gpt.spec.vocab_size = 97; gpt.spec.seq_len = 32;
    test_training("gpt L2 C64 NH4 V97 T32 B4", &gpt);
    gpt.bf16 = 1;
    test_training("gpt L2 C64 NH4 V97 T32 B4 bf16", &gpt);

    /* the Llama: GQA (4 heads over 2), RoPE, RMSNorm, SwiGLU, untied head */
    train_case llama = {.B = 4, .steps = 50, .lr = 3e-3f};
    llama.spec.kind = MODEL_LLAMA;
    llama.spec.n_layer = 2; llama.spec.n_head = 4; llama.spec.n_kv_head = 2; llama.spec.d_model = 64;
    llama.spec.d_ff = 172; llama.spec.vocab_size = 97; llama.spec.seq_len = 32; llama.spec.max_positions = 32;
    llama.spec.rope_theta = 10000;
    test_training("llama L2 C64 NH4 KV2 F172 V97 T32 B4", &llama);
    llama.bf16 = 1;
    test_training("llama L2 C64 NH4 KV2 F172 V97 T32 B4 bf16", &llama);

    train_case vit = {.B = 8, .steps = 50, .lr = 3e-3f};
    vit.spec.kind = MODEL_VIT;
    vit.spec.n_layer = 2; vit.spec.n_head = 4; vit.spec.d_model = 64; vit.spec.d_ff = 256;
    vit.spec.image_size = 16; vit.spec.patch_size = 4; vit.spec.channels = 3; vit.spec.n_classes = 10;
    test_training("vit L2 C64 NH4 S16 P4 ch3 K10 B8", &vit);
    vit.bf16 = 1;
    test_training("vit L2 C64 NH4 S16 P4 ch3 K10 B8 bf16", &vit);

    CHECK_DONE();
}
