/* jobspec_presets.c — the preset table.
 *
 * GPT-2 shapes follow the OpenAI release (vocab 50257, context 1024); the 13B and
 * 70B shapes exist for --dry-run planning and use the llm.c-padded vocabulary
 * 50304 (a multiple of 128, so any power-of-two tp divides it). gpt-70b has
 * Llama-2-70B's width and depth and its parameter count per layer on our plain
 * block (GQA + SwiGLU 3 x 28672 there = 4 C^2 + 2 C d_ff with d_ff 35840 here). vit-3b is a ~3.2e9
 * parameter ViT: 64 blocks of d 2048 (12 * 64 * 2048^2 = 3.22e9).
 *
 * Llama shapes: llama3-8b/70b/405b are the Llama 3 paper's (Dubey et al. 2024,
 * Table 3: layers, width, FFN, heads, 8 key/value heads, vocabulary 128256,
 * RoPE base 500000) at its pre-training sequence of 8192; smollm-135m is
 * SmolLM-135M's config.json (tied head, RoPE base 10000, 2048 positions);
 * llama-tiny trains in seconds on a CPU (GQA: 4 heads over 2 kv heads).
 *
 * Mixtures of experts, from each model's config.json on Hugging Face, at the
 * 4096-token sequence the MoE Parallel Folding paper (Liu et al. 2025) and
 * Megatron-Core's MoE benchmarks train them at (model.seq_len to change):
 *   mixtral-8x7b   Mixtral-8x7B-v0.1: hidden 4096, 32 layers, 32 heads over
 *                  8 kv heads, intermediate 14336, 8 local experts top-2,
 *                  vocab 32000, rope_theta 1e6, router_aux_loss_coef 0.02
 *   mixtral-8x22b  Mixtral-8x22B-v0.1: hidden 6144, 56 layers, 48 heads over
 *                  8, intermediate 16384, 8 experts top-2, vocab 32768,
 *                  rope_theta 1e6, router_aux_loss_coef 0.001
 *   qwen2-57b-a14b Qwen2-57B-A14B: hidden 3584, 28 layers, 28 heads over 4,
 *                  64 experts top-8 of moe_intermediate_size 2560 (not
 *                  normalised: norm_topk_prob false), one shared expert of
 *                  shared_expert_intermediate_size 20480 (8 x 2560 here),
 *                  vocab 151936, rope_theta 1e6; intermediate_size 18944 is
 *                  d_ff (no dense block: decoder_sparse_step 1). dtrun's
 *                  Llama block has no q, k, v biases and no sigmoid gate on
 *                  the shared expert (shared_expert_gate): 229,376
 *                  parameters fewer than Qwen2's, 4e-6 of them.
 *   deepseek-v3    DeepSeek-V3: hidden 7168, 61 layers, the first 3 dense
 *                  (first_k_dense_replace) of intermediate 18432, then 256
 *                  routed experts of moe_intermediate_size 2048 top-8 and 1
 *                  shared, sigmoid scores normalised over the top 8, the
 *                  auxiliary-loss-free bias (update 0.001) and a sequence
 *                  balance loss of 0.0001; 128 heads of multi-head latent
 *                  attention (model.mla: q_lora_rank 1536, kv_lora_rank 512,
 *                  qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128);
 *                  vocab 129280, rope_theta 10000, untied; 4096 tokens (its
 *                  pre-training sequence). Not in dtrun: node-limited routing
 *                  (n_group 8, topk_group 4), routed_scaling_factor 2.5 and
 *                  the multi-token-prediction module (the 14B beyond 671B);
 *                  the model does not compute MLA yet (--dry-run only). */
#include "lib/job/jobspec_presets.h"

#include <string.h>

static const job_preset presets[] = {
    /* name          kind       L   H     d   d_ff  vocab   seq  img patch ch classes  kv  theta   tied */
    {"gpt-tiny",   MODEL_GPT,  2,  2,   32,     0,   256,   32,   0,  0, 0,    0,  0,      0, 0},
    {"gpt-small",  MODEL_GPT,  4,  4,  256,     0,   256,  256,   0,  0, 0,    0,  0,      0, 0},
    {"gpt2-124m",  MODEL_GPT, 12, 12,  768,     0, 50257, 1024,   0,  0, 0,    0,  0,      0, 0},
    {"gpt2-350m",  MODEL_GPT, 24, 16, 1024,     0, 50257, 1024,   0,  0, 0,    0,  0,      0, 0},
    {"gpt2-774m",  MODEL_GPT, 36, 20, 1280,     0, 50257, 1024,   0,  0, 0,    0,  0,      0, 0},
    {"gpt2-1.5b",  MODEL_GPT, 48, 25, 1600,     0, 50257, 1024,   0,  0, 0,    0,  0,      0, 0},
    {"gpt-13b",    MODEL_GPT, 40, 40, 5120,     0, 50304, 2048,   0,  0, 0,    0,  0,      0, 0},
    {"gpt-70b",    MODEL_GPT, 80, 64, 8192, 35840, 50304, 4096,   0,  0, 0,    0,  0,      0, 0},
    {"vit-tiny",   MODEL_VIT,  2,  2,   32,     0,     0,    0,  28,  7, 1,   10,  0,      0, 0},
    {"vit-fmnist", MODEL_VIT,  4,  4,   64,     0,     0,    0,  28,  4, 1,   10,  0,      0, 0},
    {"vit-b16",    MODEL_VIT, 12, 12,  768,     0,     0,    0, 224, 16, 3, 1000,  0,      0, 0},
    {"vit-l16",    MODEL_VIT, 24, 16, 1024,     0,     0,    0, 224, 16, 3, 1000,  0,      0, 0},
    {"vit-h14",    MODEL_VIT, 32, 16, 1280,     0,     0,    0, 224, 14, 3, 1000,  0,      0, 0},
    {"vit-3b",     MODEL_VIT, 64, 16, 2048,     0,     0,    0, 224, 16, 3, 1000,  0,      0, 0},
    {"llama-tiny",  MODEL_LLAMA,   2,   4,    32,    64,    256,   32, 0, 0, 0, 0, 2, 10000, 0},
    {"smollm-135m", MODEL_LLAMA,  30,   9,   576,  1536,  49152, 2048, 0, 0, 0, 0, 3, 10000, 1},
    {"llama3-8b",   MODEL_LLAMA,  32,  32,  4096, 14336, 128256, 8192, 0, 0, 0, 0, 8, 500000, 0},
    {"llama3-70b",  MODEL_LLAMA,  80,  64,  8192, 28672, 128256, 8192, 0, 0, 0, 0, 8, 500000, 0},
    {"llama3-405b", MODEL_LLAMA, 126, 128, 16384, 53248, 128256, 8192, 0, 0, 0, 0, 8, 500000, 0},
    {"mixtral-8x7b",   MODEL_LLAMA, 32, 32, 4096, 14336,  32000, 4096, 0, 0, 0, 0, 8, 1e6, 0},
    {"mixtral-8x22b",  MODEL_LLAMA, 56, 48, 6144, 16384,  32768, 4096, 0, 0, 0, 0, 8, 1e6, 0},
    {"qwen2-57b-a14b", MODEL_LLAMA, 28, 28, 3584, 18944, 151936, 4096, 0, 0, 0, 0, 4, 1e6, 0},
    {"deepseek-v3",    MODEL_LLAMA, 61, 128, 7168, 18432, 129280, 4096, 0, 0, 0, 0, 128, 10000, 0},
};

#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

/* The mixtures of experts' model.moe and (DeepSeek-V3) model.mla: the rest of
 * each is in the table above. */
static const struct {
    const char *name;
    job_moe moe;
    job_mla mla;
} moe_presets[] = {
    {"mixtral-8x7b", {.experts = 8, .top_k = 2, .d_ff_expert = 14336, .every = 1, .router = ROUTER_SOFTMAX,
                      .norm_top_k = 1, .aux_loss_coef = 0.02}, {0}},
    {"mixtral-8x22b", {.experts = 8, .top_k = 2, .d_ff_expert = 16384, .every = 1, .router = ROUTER_SOFTMAX,
                       .norm_top_k = 1, .aux_loss_coef = 0.001}, {0}},
    {"qwen2-57b-a14b", {.experts = 64, .top_k = 8, .d_ff_expert = 2560, .shared_experts = 8, .every = 1,
                        .router = ROUTER_SOFTMAX, .norm_top_k = 0, .aux_loss_coef = 0.001}, {0}},
    {"deepseek-v3", {.experts = 256, .top_k = 8, .d_ff_expert = 2048, .shared_experts = 1, .every = 1,
                     .first_dense = 3, .router = ROUTER_SIGMOID, .norm_top_k = 1, .aux_loss_coef = 0.0001,
                     .bias_update_rate = 0.001},
     {.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_rope_head_dim = 64, .qk_nope_head_dim = 128, .v_head_dim = 128}},
};

const job_preset *job_preset_find(const char *name)
{
    for (int i = 0; i < N_PRESETS; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

const job_preset *job_preset_at(int i)
{
    return i >= 0 && i < N_PRESETS ? &presets[i] : NULL;
}

const job_preset *job_preset_tiny(model_kind kind)
{
    return job_preset_find(kind == MODEL_VIT ? "vit-tiny" : kind == MODEL_LLAMA ? "llama-tiny" : "gpt-tiny");
}

void job_preset_apply(const job_preset *p, job_model *m)
{
    m->kind = p->kind;
    m->n_layer = p->n_layer;
    m->n_head = p->n_head;
    m->d_model = p->d_model;
    m->d_ff = p->d_ff ? p->d_ff : 4 * p->d_model;
    m->vocab_size = p->vocab_size;
    m->seq_len = p->seq_len;
    m->image_size = p->image_size;
    m->patch_size = p->patch_size;
    m->channels = p->channels;
    m->n_classes = p->n_classes;
    m->n_kv_head = p->n_kv_head;
    m->rope_theta = p->rope_theta;
    m->tie_embeddings = p->tie_embeddings;
    m->max_positions = 0;
    for (size_t i = 0; i < sizeof moe_presets / sizeof moe_presets[0]; i++)
        if (!strcmp(moe_presets[i].name, p->name)) {
            m->moe = moe_presets[i].moe;
            if (moe_presets[i].mla.kv_lora_rank > 0) m->mla = moe_presets[i].mla;
        }
}

const char *job_preset_name(int i)
{
    const job_preset *p = job_preset_at(i);
    return p ? p->name : NULL;
}

int job_preset_model(const char *name, job_model *out)
{
    const job_preset *p = job_preset_find(name);
    if (!p) return -1;
    memset(out, 0, sizeof *out);
    job_preset_apply(p, out);
    size_t n = strlen(p->name);
    memcpy(out->preset, p->name, n + 1);
    return 0;
}
