/* llama.c — what a Llama-family decoder (Llama 2/3, Mistral, Qwen2, SmolLM:
 * Hugging Face's LlamaForCausalLM, torchtitan's llama3 model) adds to the
 * pieces the GPT is made of. The rest is shared: its embedding and head are
 * the language models' (gpt.c: no position embedding, a final RMSNorm, an
 * untied LM head unless model.tie_embeddings), its block is block.c's with
 * RMSNorms, no biases, grouped-query attention (the ops read k and v of
 * n_kv_head heads in place, ops.h) and SwiGLU over the packed gate|up GEMM.
 * Here: the rotary embedding of q and k at each token's position, and the
 * gradient of key/value heads that tensor parallelism replicates.
 *
 * Positions. A row's position is its place in its sample: under context
 * parallelism a rank holds two load-balanced chunks of each sample
 * (model_cp_chunk), so its local rows are not contiguous positions; each row
 * takes the one it has in the whole sample (cp_global_row), and the ring's
 * attention sees the same q and k as one rank would. The positions and the
 * cos / sin table of seq_len positions are made once per working set, for
 * every micro-batch that uses it.
 *
 * Replicated kv heads. With tp above n_kv_head, tp rank r's query heads read
 * kv head r / (tp / n_kv_head), which tp / n_kv_head ranks hold (params.c).
 * Each computes the gradient of its copy from its own query heads only; the
 * copies' sum is the gradient, so every copy takes it (and stays equal to
 * the others): the micro-batch's k and v rows of every rank go into one
 * [every kv head] buffer at their head's place, summed over the tp group,
 * and each rank adds its head's rows. The input gradient needs nothing: the
 * column layer sums it over the whole group anyway. */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>

void llama_rope_prepare(model *m, const block_scratch *s, int B)
{
    const model_dims *d = &m->d;
    if (!s->rope_cs) return;
    size_t N = (size_t)B * (size_t)d->seq, T = (size_t)model_seq_len(&m->spec);
    m->ops->rope_table(s->rope_cs, (int)T, d->hs, (float)job_model_rope_theta(&m->spec));
    if (m->spec.packed) return; /* packed samples: each micro-batch brings its positions (gpt_docs_from_batch) */
    int *pos = malloc(N * sizeof(int));
    if (!pos) {
        fprintf(stderr, "dtrun: model: out of host memory for %zu rotary positions\n", N);
        abort();
    }
    for (size_t i = 0; i < N; i++) pos[i] = (int)(cp_global_row(d, i) % T);
    m->ops->from_host(s->rope_pos, pos, N * sizeof(int));
    free(pos);
}

/* q's NH_l heads and k's NKV_l heads, which follow them in a row of the packed qkv */
void llama_rope_forward(model *m, void *qkv, const block_scratch *s, int N)
{
    const model_dims *d = &m->d;
    m->ops->rope_forward(qkv, d->W_l, d->NH_l + d->NKV_l, d->hs, s->rope_pos, s->rope_cs, N, m->act);
}

void llama_rope_backward(model *m, float *dqkv, const block_scratch *s, int N)
{
    const model_dims *d = &m->d;
    m->ops->rope_backward(dqkv, d->W_l, d->NH_l + d->NKV_l, d->hs, s->rope_pos, s->rope_cs, N);
}

float *llama_qkv_wgrad_begin(model *m, const block_scratch *s)
{
    m->ops->zero(s->kv_dw, (size_t)m->d.W_l * (size_t)m->d.C * sizeof(float));
    return s->kv_dw;
}

void llama_qkv_wgrad_finish(model *m, int unit, const block_scratch *s)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    size_t C = (size_t)d->C, head = (size_t)d->hs * C, nq = (size_t)d->C_l * C;
    size_t kv = (size_t)job_model_kv_heads(&m->spec), part = (size_t)(m->shard.tp_rank / d->kv_replicas);
    float *g = unit_tensor_grad(m, unit, LLAMA_Q); /* q, then k and v: packed like the weights */
    ops->residual_forward(g, g, s->kv_dw, nq, DT_F32);
    ops->zero(s->kv_all, 2 * kv * head * sizeof(float));
    ops->copy(s->kv_all + part * head, s->kv_dw + nq, head * sizeof(float));
    ops->copy(s->kv_all + (kv + part) * head, s->kv_dw + nq + head, head * sizeof(float));
    m->layers.rows_grad_sum(m->layers.ctx, s->kv_all, 2 * kv * head);
    ops->residual_forward(g + nq, g + nq, s->kv_all + part * head, head, DT_F32);
    ops->residual_forward(g + nq + head, g + nq + head, s->kv_all + (kv + part) * head, head, DT_F32);
}
