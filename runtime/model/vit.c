/* vit.c — ViT's embedding (unit 0: patch projection, class token, position
 * embedding) and head (unit L+1: final layernorm on the class token, linear
 * classifier, cross-entropy). All of their parameters are replicated under
 * tensor parallelism, so every tp rank computes the same values and gradients.
 * Batch arrays (images, labels) are host memory, copied in here.
 *
 * Stream layout per sample: position 0 = class token, 1..NP = patches in
 * row-major patch order (what patch_forward produces).
 *
 * Sequence parallelism (model.h): the embedding builds the whole stream in the
 * [N, C] scratch and keeps this rank's rows; its backward gathers the rows'
 * gradient first (model_layers.rows_gather). The head gathers the last stream
 * to pick the class tokens, and its input gradient (non-zero on class-token
 * rows only) is cut to the rank's rows. So both compute what they compute without SP, on every rank. */
#include "runtime/model/model_internal.h"

/* rows[b, :] <-> stream[b, pos, :] for b < B (rows are [B, n*C], n
 * positions), elements of e bytes */
static void gather_positions(const dt_ops *ops, void *rows, const void *stream, int B, int seq, int pos, int n,
                             int C, size_t e)
{
    for (int b = 0; b < B; b++)
        ops->copy((char *)rows + (size_t)b * n * C * e, (const char *)stream + ((size_t)b * seq + pos) * C * e,
                  (size_t)n * C * e);
}

static void scatter_positions(const dt_ops *ops, float *stream, const float *rows, int B, int seq,
                              int pos, int n, int C)
{
    for (int b = 0; b < B; b++)
        ops->copy(stream + ((size_t)b * seq + pos) * C, rows + (size_t)b * n * C,
                  (size_t)n * C * sizeof(float));
}

void vit_embedding_forward(model *m, model_acts *a, const model_batch *batch, float *out)
{
    const dt_ops *ops = m->ops;
    const job_model *s = &m->spec;
    const model_dims *d = &m->d;
    int B = batch->B, C = d->C;
    size_t img = (size_t)B * s->channels * s->image_size * s->image_size;
    /* the whole stream: out itself, or (SP) the scratch this rank's rows come from */
    float *whole = d->sp_size > 1 ? a->bs.full : out;
    if (batch->on_device) ops->copy(a->images, batch->images, img * sizeof(float));
    else ops->from_host(a->images, batch->images, img * sizeof(float));
    ops->patch_forward(a->patch_out, a->images, unit_tensor(m, 0, VIT_EMB_PATCH_W),
                       unit_tensor(m, 0, VIT_EMB_PATCH_B), B, s->channels, s->image_size,
                       s->patch_size, C);
    const float *cls = unit_tensor(m, 0, VIT_EMB_CLS);
    for (int b = 0; b < B; b++)
        ops->copy(whole + (size_t)b * d->seq * C, cls, (size_t)C * sizeof(float));
    scatter_positions(ops, whole, a->patch_out, B, d->seq, 1, d->NP, C);
    ops->posadd_forward(whole, unit_tensor(m, 0, VIT_EMB_POS), NULL, B, d->seq, C);
    if (whole != out)
        ops->copy(out, whole + rows_first(d, B) * (size_t)C, (size_t)rows_local(d, B) * (size_t)C * sizeof(float));
}

void vit_embedding_backward(model *m, model_acts *a, const float *dres, int B)
{
    const dt_ops *ops = m->ops;
    const job_model *s = &m->spec;
    const model_dims *d = &m->d;
    int C = d->C;
    dres = m->layers.rows_gather(m->layers.ctx, dres, a->bs.full, (size_t)B * (size_t)d->seq * (size_t)C, DT_F32);
    ops->posadd_backward(unit_tensor_grad(m, 0, VIT_EMB_POS), dres, NULL, B, d->seq, C);
    /* patch_out is free after the forward: reuse it for the patches' gradient */
    gather_positions(ops, a->patch_out, dres, B, d->seq, 1, d->NP, C, sizeof(float));
    ops->patch_backward(unit_tensor_grad(m, 0, VIT_EMB_PATCH_W), unit_tensor_grad(m, 0, VIT_EMB_PATCH_B),
                        a->patch_out, a->images, B, s->channels, s->image_size, s->patch_size, C);
    /* dcls = sum over samples of the class-token rows: posadd_backward with T = 1 */
    gather_positions(ops, a->cls_tmp, dres, B, d->seq, 0, 1, C, sizeof(float));
    ops->posadd_backward(unit_tensor_grad(m, 0, VIT_EMB_CLS), a->cls_tmp, NULL, B, 1, C);
}

double vit_head_forward(model *m, model_acts *a, const model_batch *batch, const void *x,
                        int *correct)
{
    const dt_ops *ops = m->ops;
    int head = m->spec.n_layer + 1;
    int B = batch->B, C = m->d.C, K = m->spec.n_classes;
    if (batch->on_device) ops->copy(a->labels, batch->labels, (size_t)B * sizeof(int));
    else ops->from_host(a->labels, batch->labels, (size_t)B * sizeof(int));
    x = m->layers.rows_gather(m->layers.ctx, x, a->bs.full, (size_t)B * (size_t)m->d.seq * (size_t)C, m->act);
    gather_positions(ops, a->cls_x, x, B, m->d.seq, 0, 1, C, dt_dtype_size(m->act));
    ops->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->cls_x,
                           unit_tensor(m, head, VIT_HEAD_LNF_W), unit_tensor(m, head, VIT_HEAD_LNF_B),
                           B, C, model_norm_eps(m), m->act);
    ops->matmul_forward(a->logits, a->lnf, unit_weight(m, head, VIT_HEAD_W),
                        unit_tensor(m, head, VIT_HEAD_B), B, C, K, m->act, DT_F32);
    /* the classifier is replicated: no tp reductions between these */
    ops->xent_stats(a->rowmax, a->sumexp, a->target, a->logits, a->labels, 0, B, K);
    ops->xent_loss(a->loss, a->rowmax, a->sumexp, a->target, a->labels, B);
    if (batch->loss_sum) { /* kept on the device (model_batch): the loop below, there; no accuracy */
        ops->loss_sum_add(batch->loss_sum, a->loss, B);
        return 0;
    }
    ops->to_host(a->host_loss, a->loss, (size_t)B * sizeof(float));
    double sum = 0;
    for (int b = 0; b < B; b++) sum += a->host_loss[b];
    if (correct) {
        ops->to_host(a->host_logits, a->logits, (size_t)B * (size_t)K * sizeof(float));
        int right = 0;
        for (int b = 0; b < B; b++) {
            const float *row = a->host_logits + (size_t)b * K;
            int best = 0;
            for (int k = 1; k < K; k++)
                if (row[k] > row[best]) best = k;
            right += best == batch->labels[b];
        }
        *correct = right;
    }
    return sum;
}

void vit_head_backward(model *m, model_acts *a, const model_batch *batch, const void *x,
                       float *dres, float loss_scale)
{
    const dt_ops *ops = m->ops;
    int head = m->spec.n_layer + 1;
    int B = batch->B, C = m->d.C, K = m->spec.n_classes;
    size_t BC = (size_t)B * (size_t)C;
    (void)x; /* the head's input rows were gathered into cls_x in the forward */
    if (batch->on_device) { /* from the labels the forward put on the device */
        ops->loss_seed(a->dloss, a->labels, loss_scale, B);
    } else {
        for (int b = 0; b < B; b++) a->host_dloss[b] = batch->labels[b] >= 0 ? loss_scale : 0.0f;
        ops->from_host(a->dloss, a->host_dloss, (size_t)B * sizeof(float));
    }
    ops->xent_backward(a->dlogits, a->logits, a->rowmax, a->sumexp, a->labels, a->dloss, 0, B, K);
    float *dlnf = a->bs.dln;
    ops->zero(dlnf, BC * sizeof(float));
    ops->matmul_backward(dlnf, unit_tensor_grad(m, head, VIT_HEAD_W), unit_tensor_grad(m, head, VIT_HEAD_B),
                         a->dlogits, a->lnf, unit_weight(m, head, VIT_HEAD_W), B, C, K, m->act);
    ops->zero(a->dcls_x, BC * sizeof(float));
    ops->layernorm_backward(a->dcls_x, unit_tensor_grad(m, head, VIT_HEAD_LNF_W),
                            unit_tensor_grad(m, head, VIT_HEAD_LNF_B), dlnf, a->cls_x,
                            unit_tensor(m, head, VIT_HEAD_LNF_W), a->lnf_mean, a->lnf_rstd, B, C, m->act);
    /* only the class tokens feed the head: every other position's gradient is 0;
     * of the class-token rows, those among this rank's rows (all without SP) */
    const model_dims *d = &m->d;
    size_t first = rows_first(d, B), Nl = (size_t)rows_local(d, B);
    ops->zero(dres, Nl * (size_t)C * sizeof(float));
    for (int b = 0; b < B; b++) {
        size_t row = (size_t)b * (size_t)d->seq;
        if (row >= first && row < first + Nl)
            ops->copy(dres + (row - first) * C, a->dcls_x + (size_t)b * C, (size_t)C * sizeof(float));
    }
}

const float *model_acts_vit_logits(const model_acts *a) { return a->host_logits; }
