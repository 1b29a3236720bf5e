/* lora.c — LoRA's adapter math on a linear layer (lora.h), and the adapters'
 * shapes. Every product goes through the ops table: A's GEMM (x -> h), B's
 * (h -> the delta) and their backward (matmul_backward's parts: dinp, dw),
 * dropout's counter-based mask, the strided adds of rows_copy. */
#include "runtime/model/lora.h"

#include "runtime/model/model_internal.h"

/* The adapter's input: x itself, or (training with dropout) dropout(x) in
 * the scratch. */
static const void *adapter_input(const dt_ops *ops, const model_lora *l, int k, const void *x, int N, int IC,
                                 dt_dtype t)
{
    if (l->p <= 0.0f) return x;
    ops->dropout_forward(l->xd, x, l->rows, N, IC, l->feats, l->feat0, l->ad[k].key, l->p, t);
    return l->xd;
}

/* h = s xd A^T [N, r], of the activations' type (bf16: rounded once from
 * fp32, as every kept activation). With `sum`, this rank's part is summed
 * over the group first (a row-parallel adapter's backward). */
static const void *adapter_h(const dt_ops *ops, const model_lora *l, int k, const void *xd, int N, int IC, dt_dtype t,
                             lora_sum_fn sum, void *ctx)
{
    size_t nr = (size_t)N * (size_t)l->r;
    ops->matmul_forward(l->h32, xd, l->ad[k].A, NULL, N, IC, l->r, t, DT_F32);
    if (sum) sum(ctx, l->h32, nr);
    ops->scale(l->h32, l->scale, nr);
    if (t == DT_F32) return l->h32;
    ops->to_bf16(l->h, l->h32, nr);
    return l->h;
}

/* din += dh A through the dropout's mask (dh already times s). */
static void adapter_input_grad(const dt_ops *ops, const model_lora *l, int k, float *din, int N, int IC, dt_dtype t)
{
    if (l->p <= 0.0f) {
        ops->matmul_backward(din, NULL, NULL, l->dh, NULL, l->ad[k].A, N, IC, l->r, t);
        return;
    }
    ops->zero(l->dxd, (size_t)N * (size_t)IC * sizeof(float));
    ops->matmul_backward(l->dxd, NULL, NULL, l->dh, NULL, l->ad[k].A, N, IC, l->r, t);
    ops->dropout_backward(din, l->dxd, l->rows, N, IC, l->feats, l->feat0, l->ad[k].key, l->p);
}

void lora_column_forward(const dt_ops *ops, const model_lora *l, void *out, const void *x, const void *w,
                         const float *b, int N, int IC, int OC, dt_dtype t)
{
    /* the sum in fp32, stored once in type t */
    float *y = t == DT_F32 ? out : l->y;
    ops->matmul_forward(y, x, w, b, N, IC, OC, t, DT_F32);
    for (int k = 0; k < l->n; k++) {
        const lora_adapter *a = &l->ad[k];
        const void *h = adapter_h(ops, l, k, adapter_input(ops, l, k, x, N, IC, t), N, IC, t, NULL, NULL);
        ops->matmul_forward(l->dt, h, a->B, NULL, N, l->r, a->cols, t, DT_F32);
        ops->rows_copy(y + a->col0, OC, l->dt, a->cols, N, a->cols, 1, DT_F32);
    }
    if (t != DT_F32) ops->to_bf16(out, y, (size_t)N * (size_t)OC);
}

void lora_column_backward(const dt_ops *ops, const model_lora *l, float *din, const float *dout, const void *x, int N,
                          int IC, int OC, dt_dtype t, lora_sum_fn sum, void *ctx)
{
    size_t nr = (size_t)N * (size_t)l->r;
    for (int k = 0; k < l->n; k++) {
        const lora_adapter *a = &l->ad[k];
        const void *xd = adapter_input(ops, l, k, x, N, IC, t);
        const void *h = adapter_h(ops, l, k, xd, N, IC, t, NULL, NULL);
        const float *dy = dout;
        if (a->cols != OC) { /* the target's columns, contiguous */
            ops->rows_copy(l->dt, a->cols, dout + a->col0, OC, N, a->cols, 0, DT_F32);
            dy = l->dt;
        }
        ops->zero(l->dh, nr * sizeof(float));
        ops->matmul_backward(l->dh, a->dB, NULL, dy, h, a->B, N, l->r, a->cols, t);
        ops->scale(l->dh, l->scale, nr);
        /* this rank's part of the input gradient; A's gradient needs all of dh */
        adapter_input_grad(ops, l, k, din, N, IC, t);
        if (sum) sum(ctx, l->dh, nr);
        ops->matmul_backward(NULL, a->dA, NULL, l->dh, xd, NULL, N, IC, l->r, t);
    }
}

void lora_row_forward(const dt_ops *ops, const model_lora *l, float *partial, const void *x, int N, int IC, int OC,
                      dt_dtype t)
{
    for (int k = 0; k < l->n; k++) {
        const void *h = adapter_h(ops, l, k, adapter_input(ops, l, k, x, N, IC, t), N, IC, t, NULL, NULL);
        ops->matmul_forward(l->y, h, l->ad[k].B, NULL, N, l->r, OC, t, DT_F32);
        ops->residual_forward(partial, partial, l->y, (size_t)N * (size_t)OC, DT_F32);
    }
}

void lora_row_backward(const dt_ops *ops, const model_lora *l, float *din, const float *dout, const void *x, int N,
                       int IC, int OC, dt_dtype t, lora_sum_fn sum, void *ctx)
{
    size_t nr = (size_t)N * (size_t)l->r;
    for (int k = 0; k < l->n; k++) {
        const lora_adapter *a = &l->ad[k];
        const void *xd = adapter_input(ops, l, k, x, N, IC, t);
        const void *h = adapter_h(ops, l, k, xd, N, IC, t, sum, ctx); /* whole: every rank's part summed */
        ops->zero(l->dh, nr * sizeof(float));
        ops->matmul_backward(l->dh, a->dB, NULL, dout, h, a->B, N, l->r, OC, t);
        ops->scale(l->dh, l->scale, nr);
        adapter_input_grad(ops, l, k, din, N, IC, t);
        ops->matmul_backward(NULL, a->dA, NULL, l->dh, xd, NULL, N, IC, l->r, t);
    }
}

/* ---- shapes ---- */

int lora_count(const job_model *m)
{
    if (!job_lora_on(m)) return 0;
    int n = 0;
    for (int i = 0; i < LORA_N_TARGETS; i++) n += (m->lora.targets >> i) & 1;
    return n;
}

int lora_target(const job_model *m, int k)
{
    for (int i = 0; i < LORA_N_TARGETS; i++)
        if ((m->lora.targets >> i) & 1 && k-- == 0) return i;
    return -1;
}

void lora_geometry(const job_model *m, int target, int *in, int *out, int *row)
{
    int C = m->d_model, F = m->d_ff, Ckv = job_model_kv_heads(m) * (C / m->n_head);
    *in = C, *out = C, *row = 0;
    switch (1 << target) {
    case LORA_K: case LORA_V: *out = m->kind == MODEL_LLAMA ? Ckv : C; break;
    case LORA_O: *row = 1; break;
    case LORA_GATE: case LORA_UP: *out = F; break;
    case LORA_DOWN: *in = F, *row = 1; break;
    default: break; /* q */
    }
}

void lora_block_flops(const job_model *m, int tp, double rows, double *fwd, double *fwd_a, double *fwd_recomputed)
{
    *fwd = *fwd_a = *fwd_recomputed = 0;
    for (int k = 0; k < lora_count(m); k++) {
        int t = lora_target(m, k), in, out, row;
        lora_geometry(m, t, &in, &out, &row);
        /* a column base's A whole (on every tp rank) and B's rows split; a
         * row base's A's columns split and B whole */
        double a = 2.0 * rows * m->lora.rank * (row ? (double)in / tp : in);
        double b = 2.0 * rows * m->lora.rank * (row ? (double)out : (double)out / tp);
        *fwd += a + b;
        *fwd_a += a;
        if (t != 6) *fwd_recomputed += a + b; /* block recompute stops before the MLP's down projection */
    }
}
