/* test_lora.c — train.lora in the model (runtime/model/lora.c): the
 * adapters' gradients against finite differences (GPT with q, k, v in its
 * fused qkv, o, up and down; Llama with every target; with and without
 * dropout), the base frozen (no gradient buffer, nothing written), the
 * adapters' specs (names, shapes, tp splits: a column-parallel base's B by
 * rows, a row-parallel base's A by columns) and the parameter counts, and
 * the dropout's mask: rng_uniform's draw, the same for a shard as for the
 * whole. Tiny models keep it well under a second. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "runtime/model/model.h"
#include "runtime/parallel/sizes.h"
#include "runtime/rng.h"
#include "test/unit/check.h"
#include "test/unit/tiny_models.h"

static const dt_ops *ops = &dt_ops_cpu;
enum { TB = 2 };

static job_model with_lora(job_model s, int targets, double dropout)
{
    s.lora.rank = 3;
    s.lora.alpha = 6;
    s.lora.dropout = dropout;
    s.lora.targets = targets;
    return s;
}

typedef struct {
    int tokens[TB * 8], targets[TB * 8];
    model_batch mb;
} test_batch;

static void make_batch(test_batch *t, const job_model *s, long step)
{
    memset(t, 0, sizeof *t);
    uint64_t k = rng_key(5, "lora-batch");
    for (int i = 0; i < TB * s->seq_len; i++) {
        t->tokens[i] = (int)rng_below(k, (uint64_t)i, (uint64_t)s->vocab_size);
        t->targets[i] = (int)rng_below(k, 1000 + (uint64_t)i, (uint64_t)s->vocab_size);
    }
    t->mb = (model_batch){.B = TB, .tokens = t->tokens, .targets = t->targets, .step = step, .sample0 = 4};
}

/* Spread values everywhere (B too, which starts at zero in a run: its
 * gradient would leave A's at zero). */
static void test_init(model *m)
{
    for (int i = 0; i < model_param_count(m); i++) {
        const param_spec *p = model_param(m, i);
        float *d = model_param_data(m, i);
        uint64_t k = rng_key(13, p->name);
        for (size_t j = 0; j < p->local_numel; j++) {
            float n = rng_normal(k, j);
            d[j] = p->init == INIT_ONES ? 1.0f + 0.1f * n : p->init == INIT_ZEROS ? 0.2f * n : 0.3f * n;
        }
    }
}

static double loss_moved(model *m, model_acts *a, const model_batch *mb, int i, size_t n, const float *delta)
{
    float *d = model_param_data(m, i), *saved = malloc(n * sizeof(float));
    for (size_t t = 0; t < n; t++) saved[t] = d[t], d[t] += delta[t];
    double l = model_forward(m, a, mb, NULL);
    memcpy(d, saved, n * sizeof(float));
    free(saved);
    return l;
}

/* Directional finite differences per adapter (every element moved by +-eps
 * with random signs: the signal scales with sum |g|), and the frozen
 * tensors: no gradient, unchanged by forward and backward. */
static void grad_check(const job_model *s, const char *what)
{
    int L = s->n_layer;
    model_shard sh = {.tp_rank = 0, .tp_size = 1, .unit_begin = 0, .unit_end = L + 2};
    model *m = model_create(s, &sh, ops, RECOMPUTE_NONE);
    model_init_params(m, 9);
    test_init(m);
    model_acts *a = model_acts_create(m, TB);
    test_batch tb;
    make_batch(&tb, s, 3);
    /* the frozen base's bytes before */
    size_t fbytes = 0;
    for (int u = 0; u < L + 2; u++) fbytes += model_unit_frozen_local_numel(m, u) * sizeof(float);
    unsigned char *before = malloc(fbytes), *at = before;
    for (int u = 0; u < L + 2; u++) {
        size_t b = model_unit_frozen_local_numel(m, u) * sizeof(float);
        memcpy(at, model_unit_frozen(m, u), b);
        at += b;
    }
    model_zero_grads(m);
    model_forward(m, a, &tb.mb, NULL);
    model_backward(m, a, &tb.mb, 1.0f);
    int same = 1;
    at = before;
    for (int u = 0; u < L + 2; u++) {
        size_t b = model_unit_frozen_local_numel(m, u) * sizeof(float);
        same &= memcmp(at, model_unit_frozen(m, u), b) == 0;
        at += b;
    }
    free(before);
    const float eps = 1e-3f;
    double max_dir = 0;
    int adapters = 0, frozen = 0, no_grad = 1;
    char worst[PARAM_NAME_MAX] = "";
    uint64_t key = rng_key(3, "signs");
    for (int i = 0; i < model_param_count(m); i++) {
        const param_spec *p = model_param(m, i);
        if (p->frozen) {
            frozen++;
            no_grad &= model_param_grad(m, i) == NULL && !p->lora;
            continue;
        }
        adapters++;
        const float *g = model_param_grad(m, i);
        size_t n = p->local_numel;
        float *up = malloc(n * sizeof(float)), *down = malloc(n * sizeof(float));
        double ana = 0, mag = 0;
        for (size_t j = 0; j < n; j++) {
            float sign = rng_below(key, (uint64_t)i * 100000 + j, 2) ? 1.0f : -1.0f;
            up[j] = sign * eps;
            down[j] = -sign * eps;
            ana += (double)sign * g[j];
            mag += fabs(g[j]);
        }
        double num = (loss_moved(m, a, &tb.mb, i, n, up) - loss_moved(m, a, &tb.mb, i, n, down)) / (2.0 * eps);
        double err = fabs(num - ana) / fmax(mag, 0.05);
        if (err > max_dir) max_dir = err, snprintf(worst, sizeof worst, "%s", p->name);
        free(up), free(down);
    }
    CHECK(adapters == 2 * L * __builtin_popcount((unsigned)s->lora.targets) && max_dir < 2e-3,
          "%s: directional finite differences on each of %d adapters: max rel err %.2e (at %s) < 2e-3", what,
          adapters, max_dir, worst);
    CHECK(frozen > 0 && no_grad && same,
          "%s: the %d base tensors are frozen: no gradient, bitwise unchanged by a forward and backward", what, frozen);
    model_acts_destroy(a);
    model_destroy(m);
}

/* The adapters' specs on tp rank 1 of 2, and the counts. */
static void specs(void)
{
    job_model l = with_lora(tiny_llama_spec(), LORA_Q | LORA_K | LORA_O | LORA_DOWN, 0);
    int first = -1, found = 0;
    for (int i = 0; i < model_unit_param_count(&l, 1); i++) {
        param_spec p;
        model_unit_param_spec(&l, 1, i, 1, 2, &p);
        if (!p.lora) continue;
        if (first < 0) first = i;
        found++;
        int ok = 1;
        /* q: A [3, 16] whole, B [16, 3] rows split; k: B [8, 3]; o: A cols split; down: A [3, 24] cols split */
        if (!strcmp(p.name, "h.0.lora.q.a")) ok = p.split == SPLIT_NONE && p.local_shape[0] == 3 && p.local_shape[1] == 16;
        else if (!strcmp(p.name, "h.0.lora.q.b")) ok = p.split == SPLIT_ROWS && p.local_shape[0] == 8;
        else if (!strcmp(p.name, "h.0.lora.k.b")) ok = p.split == SPLIT_ROWS && p.shape[0] == 8 && p.local_shape[0] == 4;
        else if (!strcmp(p.name, "h.0.lora.o.a")) ok = p.split == SPLIT_COLS && p.local_shape[1] == 8;
        else if (!strcmp(p.name, "h.0.lora.o.b")) ok = p.split == SPLIT_NONE && p.local_shape[0] == 16;
        else if (!strcmp(p.name, "h.0.lora.down.a")) ok = p.split == SPLIT_COLS && p.shape[1] == 24 && p.local_shape[1] == 12;
        CHECK(ok && !p.frozen && p.decay, "llama tp rank 1 of 2: %s [%d, %d] split %d local [%d, %d]", p.name,
              p.shape[0], p.shape[1], p.split, p.local_shape[0], p.local_shape[1]);
    }
    CHECK(found == 8 && first == 9, "llama: 4 targets give 8 adapter tensors after the block's 9 base ones");
    size_t base = model_unit_frozen_numel(&l, 1, 0, 1);
    job_model nl = tiny_llama_spec();
    CHECK(base == model_unit_numel(&nl, 1, 0, 1) && model_unit_frozen_numel(&nl, 1, 0, 1) == 0,
          "the frozen block is the plain block (%zu elements), a model without LoRA freezes nothing", base);
    /* q 3x16 + 16x3, k 3x16 + 8x3, o 3x16 + 16x3, down 3x24 + 16x3 */
    size_t want = 96 + 72 + 96 + 120;
    CHECK(model_unit_numel(&l, 1, 0, 1) == want && model_unit_numel(&l, 0, 0, 1) == 0 && model_unit_numel(&l, 3, 0, 1) == 0,
          "a block trains its %zu adapter elements, the embedding and head nothing", want);
    size_t t0 = model_unit_numel(&l, 1, 0, 2), t1 = model_unit_numel(&l, 1, 1, 2);
    /* tp 2: A of q, k whole (48 each), their B halved (24, 12); o, down: A halved (24, 36), B whole (48, 48) */
    CHECK(t0 == t1 && t0 == 48 + 24 + 48 + 12 + 24 + 48 + 36 + 48, "tp 2: each rank holds %zu adapter elements", t0);
}

/* The mask is rng_uniform's draw of (key, row x cols + col), for a shard
 * (col0) as for the whole; kept values scaled by 1 / (1 - p). */
static void dropout_mask(void)
{
    enum { N = 5, W = 7, COLS = 20, COL0 = 9 };
    float x[N * W], out[N * W], dx[N * W], dout[N * W];
    long long rows[N] = {3, 0, 17, 4, 100};
    for (int i = 0; i < N * W; i++) x[i] = 1.0f + (float)i, dout[i] = 2.0f, dx[i] = 0.5f;
    uint64_t key = rng_key3(1, "lora.dropout", 2, 3);
    float p = 0.4f;
    ops->dropout_forward(out, x, rows, N, W, COLS, COL0, key, p, DT_F32);
    ops->dropout_backward(dx, dout, rows, N, W, COLS, COL0, key, p);
    int ok = 1, kept = 0;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < W; j++) {
            int keep = rng_uniform(key, (uint64_t)(rows[n] * COLS + COL0 + j)) >= p;
            kept += keep;
            float s = 1.0f / (1.0f - p);
            ok &= out[n * W + j] == (keep ? x[n * W + j] * s : 0.0f);
            ok &= dx[n * W + j] == (keep ? 0.5f + 2.0f * s : 0.5f);
        }
    CHECK(ok && kept > 0 && kept < N * W, "dropout: %d of %d kept, each as rng_uniform draws it, scaled 1 / (1 - p)",
          kept, N * W);
}

/* The FLOP counts: a frozen weight's backward is its input gradient alone
 * (4 per weight and token instead of 6), the adapters add 6 per weight and
 * token and h again in backward; the step-time model's GEMMs add up to
 * model_unit_flops (sizes.h's promise, here at tp 1). */
static void flops(void)
{
    job_model l = tiny_llama_spec(), a = with_lora(l, LORA_Q | LORA_DOWN, 0);
    double seq = l.seq_len, C = l.d_model, F = l.d_ff, Ckv = 8, r = 3;
    double base = 2 * C * C + 2 * C * Ckv + 3 * C * F, att = 12 * seq * seq * C;
    /* q: A [3, 16], B [16, 3]; down: A [3, 24], B [16, 3]; h = A x again in backward */
    double ad = 2 * seq * r * (C + C) + 2 * seq * r * (F + C), ad_a = 2 * seq * r * (C + F);
    double want = 4 * base * seq + att + 3 * ad + ad_a;
    double got = model_unit_flops(&a, 1, RECOMPUTE_NONE);
    CHECK(fabs(got - want) < 1e-6 * want && model_unit_flops(&l, 1, RECOMPUTE_NONE) == 6 * base * seq + att,
          "block FLOPs: %.0f with LoRA (4 per frozen weight, the adapters' 3 x forward + A's again), %.0f without",
          got, model_unit_flops(&l, 1, RECOMPUTE_NONE));
    int ok = 1;
    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_SELECTIVE; rc++)
        for (int u = 0; u < l.n_layer + 2; u++) {
            sizes_unit_work w;
            sizes_unit_work_of(&a, u, (recompute_kind)rc, 2, 1, 0, 4, &w);
            double sum = 0;
            for (int g = 0; g < w.n_gemm; g++) sum += w.gemm[g].fwd_flops + w.gemm[g].bwd_flops;
            double unit = sizes_unit_flops(&a, u, (recompute_kind)rc) * 2;
            ok &= fabs(sum - unit) <= 1e-9 * (unit + 1);
        }
    CHECK(ok, "the step-time model's GEMMs add up to the model's FLOPs with LoRA, every unit and recompute kind");
}

int main(void)
{
    dt_ops_set_threads(1);
    job_model g = tiny_gpt_spec(), l = tiny_llama_spec();
    int all = LORA_Q | LORA_K | LORA_V | LORA_O | LORA_GATE | LORA_UP | LORA_DOWN;
    grad_check((job_model[]){with_lora(g, all & ~LORA_GATE, 0)}, "gpt, q k v o up down");
    grad_check((job_model[]){with_lora(g, LORA_K | LORA_DOWN, 0.3)}, "gpt, k and down, dropout 0.3");
    job_model ge = with_lora(g, LORA_UP | LORA_O, 0);
    ge.activation = ACT_GELU;
    grad_check(&ge, "gpt, exact gelu, up and o");
    grad_check((job_model[]){with_lora(l, all, 0)}, "llama, every target");
    grad_check((job_model[]){with_lora(l, LORA_V | LORA_GATE, 0.5)}, "llama, v and gate, dropout 0.5");
    job_model lt = with_lora(l, LORA_Q | LORA_UP, 0);
    lt.tie_embeddings = 1;
    grad_check(&lt, "llama tied head, q and up");
    specs();
    dropout_mask();
    flops();
    CHECK_DONE();
}
