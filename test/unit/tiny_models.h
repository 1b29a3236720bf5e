/* tiny_models.h — the two-block GPT and ViT the model and optimizer unit
 * tests compute on (small enough to check element by element). */
#ifndef DTRUN_TEST_TINY_MODELS_H
#define DTRUN_TEST_TINY_MODELS_H

#include <string.h>

#include "lib/job/jobspec.h"

static inline job_model tiny_gpt_spec(void)
{
    job_model s;
    memset(&s, 0, sizeof s);
    s.kind = MODEL_GPT;
    s.n_layer = 2; s.n_head = 2; s.d_model = 16; s.d_ff = 64;
    s.vocab_size = 32; s.seq_len = 8;
    return s;
}

static inline job_model tiny_vit_spec(void)
{
    job_model s;
    memset(&s, 0, sizeof s);
    s.kind = MODEL_VIT;
    s.n_layer = 2; s.n_head = 2; s.d_model = 16; s.d_ff = 64;
    s.image_size = 8; s.patch_size = 4; s.channels = 1; s.n_classes = 3;
    return s;
}

/* Llama: 4 query heads over 2 kv heads (GQA) of size 4 (RoPE pairs), SwiGLU
 * of 24, an untied head. */
static inline job_model tiny_llama_spec(void)
{
    job_model s;
    memset(&s, 0, sizeof s);
    s.kind = MODEL_LLAMA;
    s.n_layer = 2; s.n_head = 4; s.n_kv_head = 2; s.d_model = 16; s.d_ff = 24;
    s.vocab_size = 32; s.seq_len = 8; s.max_positions = 8; s.rope_theta = 10000;
    return s;
}

/* model.moe on both language models: every block MoE, 4 experts of 8
 * (d_ff_expert), top 2 by softmax, weights normalised, a balance loss of
 * 0.1 (large, so that its gradient shows), dropless. */
static inline job_moe tiny_moe(void)
{
    job_moe e;
    memset(&e, 0, sizeof e);
    e.experts = 4; e.top_k = 2; e.d_ff_expert = 8; e.every = 1;
    e.router = ROUTER_SOFTMAX; e.norm_top_k = 1; e.aux_loss_coef = 0.1;
    return e;
}

static inline job_model tiny_moe_gpt_spec(void)
{
    job_model s = tiny_gpt_spec();
    s.moe = tiny_moe();
    return s;
}

static inline job_model tiny_moe_llama_spec(void)
{
    job_model s = tiny_llama_spec();
    s.moe = tiny_moe();
    return s;
}

#endif
